//! The few pages the gateway answers itself (everything else is Executor's).

/// The page for a request without a valid session.
pub fn sign_in_needed(box_name: &str) -> String {
    page(
        "Sign in with box open",
        &format!(
            "<p>This is the box gateway of <b>{box_name}</b>. Run <code>box open {box_name}</code> in a terminal to sign in.</p>"
        ),
    )
}

/// The page a redeemed sign-in link answers with: it goes on to Executor's UI at once.
pub fn signed_in(box_name: &str) -> String {
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"0;url=/\"><title>Signed in</title>\
         <script>location.replace(\"/\")</script></head>\
         <body><p>Signed in to the box gateway of <b>{box_name}</b>. \
         <a href=\"/\">Continue to Executor</a></p></body></html>\n"
    )
}

/// The page for a sign-in link that was already used, has expired, or never existed.
pub fn link_used(box_name: &str) -> String {
    page(
        "Sign-in link used or expired",
        &format!(
            "<p>Sign-in links work once, for a minute. Run <code>box open {box_name}</code> for a new one.</p>"
        ),
    )
}

/// The page for a request at any name but the box's own. It names no box: a
/// DNS-rebinding site reads it.
pub fn wrong_host() -> String {
    page(
        "Wrong host",
        "<p>This box gateway answers only at the address <code>box open</code> gives it \
         (<code>http://box-&lt;name&gt;.localhost:&lt;port&gt;</code>), not at 127.0.0.1 or localhost: \
         run <code>box open &lt;name&gt;</code> to open the box's UI.</p>",
    )
}

pub fn other_site(box_name: &str) -> String {
    page(
        "Request from another site refused",
        &format!(
            "<p>The box gateway of <b>{box_name}</b> answers only its own pages and the address bar: \
             another site, or a web page on another local port, may not frame it or send it requests. \
             Run <code>box open {box_name}</code> to open it.</p>"
        ),
    )
}

pub fn foreign_origin() -> String {
    page(
        "Cross-origin request refused",
        "<p>The box gateway refuses state-changing requests from other origins.</p>",
    )
}

pub fn upstream_down(box_name: &str, detail: &str) -> String {
    page(
        "Executor is not reachable",
        &format!(
            "<p>{detail}</p><p>Check the box with <code>box doctor {box_name}</code>, then run <code>box open {box_name}</code>.</p>"
        ),
    )
}

fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{title}</title></head>\
         <body style=\"font-family:sans-serif;max-width:40em;margin:4em auto\"><h1>{title}</h1>{body}</body></html>\n"
    )
}
