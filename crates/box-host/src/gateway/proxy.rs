//! One request through the gateway: guards, sign-in, session check, then forwarding to the
//! box's published Executor port with `Authorization: Bearer <token>` added.
//!
//! Bodies are streamed both ways frame by frame (SSE and chunked replies reach the browser
//! as Executor writes them); WebSocket (any `Upgrade`) handshakes are passed through and the
//! two upgraded connections spliced. Redirects to Executor's own origin are rewritten to the
//! gateway's. The token is only ever put into the upstream request's header (marked
//! sensitive); it is in no response, log line or error.

use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Body as _, Incoming};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use box_proto::mcp::BearerToken;

use super::activity::{Activity, Busy};
use super::clock::Moment;
use super::headers::{
    downstream_headers, forbid_framing, header_str, is_upgrade, upstream_headers,
};
use super::nonce::Nonces;
use super::session::{self, Lifetimes, SessionEnd, Sessions};
use super::upstream_cookies::UpstreamCookies;
use super::{BoxProbe, guard, pages};

pub type Body = BoxBody<Bytes, hyper::Error>;

/// The gateway's own sign-in route: `GET /__box/sign-in?nonce=<hex>`.
pub const SIGN_IN_PATH: &str = "/__box/sign-in";

/// A token is re-read at most this often, however many requests Executor refuses at once.
const REFRESH_INTERVAL: Duration = Duration::from_secs(3);

/// Everything the request handlers of one gateway share.
pub struct Shared {
    pub box_name: String,
    /// `<host name>:<port>`: the one `Host` the gateway answers (see `host_name`).
    pub authority: String,
    pub upstream_port: u16,
    pub nonces: Mutex<Nonces>,
    pub sessions: Mutex<Sessions>,
    pub activity: Arc<Activity>,
    pub probe: Arc<dyn BoxProbe>,
    /// The cookies Executor set through this gateway: the only ones forwarded to it.
    cookies: UpstreamCookies,
    token: Mutex<Option<BearerToken>>,
    refresh: tokio::sync::Mutex<Option<Instant>>,
    /// Set to the reason when the gateway must stop.
    pub shutdown: tokio::sync::watch::Sender<Option<String>>,
}

impl Shared {
    pub fn new(
        box_name: String,
        authority: String,
        upstream_port: u16,
        token: BearerToken,
        probe: Arc<dyn BoxProbe>,
        lifetimes: Lifetimes,
    ) -> Self {
        Self {
            box_name,
            authority,
            upstream_port,
            nonces: Mutex::default(),
            sessions: Mutex::new(Sessions::new(lifetimes)),
            activity: Activity::new(),
            probe,
            cookies: UpstreamCookies::default(),
            token: Mutex::new(Some(token)),
            refresh: tokio::sync::Mutex::new(None),
            shutdown: tokio::sync::watch::channel(None).0,
        }
    }

    pub fn stop(&self, reason: impl Into<String>) {
        let reason = reason.into();
        self.shutdown.send_if_modified(|r| {
            if r.is_none() {
                *r = Some(reason);
                true
            } else {
                false
            }
        });
    }

    fn current_token(&self) -> Option<BearerToken> {
        lock(&self.token).clone()
    }

    /// After Executor refused `used`: re-read the token (it changes when Executor is
    /// restarted, repaired or the box loaded), unless another request just did.
    async fn refresh_after_refusal(&self, used: &BearerToken) -> Option<BearerToken> {
        let mut last = self.refresh.lock().await;
        if let Some(current) = self.current_token()
            && (&current != used || last.is_some_and(|t| t.elapsed() < REFRESH_INTERVAL))
        {
            return Some(current);
        }
        let probe = Arc::clone(&self.probe);
        let fresh = tokio::task::spawn_blocking(move || probe.token()).await;
        *last = Some(Instant::now());
        match fresh {
            Ok(Ok(t)) => {
                *lock(&self.token) = Some(t.clone());
                Some(t)
            }
            Ok(Err(e)) => {
                tracing::warn!(
                    "cannot re-read Executor's token of '{}': {e:#}",
                    self.box_name
                );
                None
            }
            Err(e) => {
                tracing::warn!("token reader failed: {e}");
                None
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed()
}

/// A page the gateway answers itself; never cached, never framed.
fn page(status: StatusCode, html: String) -> Response<Body> {
    let mut r = Response::new(full(html));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    forbid_framing(h);
    // A refused request (an upgrade in particular) gets no second chance on this connection.
    h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// The entry point for every request a browser sends the gateway.
pub async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let busy = shared.activity.begin();
    let headers = req.headers();
    if !guard::host_allowed(header_str(headers, header::HOST), &shared.authority) {
        return Ok(page(StatusCode::FORBIDDEN, pages::wrong_host()));
    }
    if req.uri().path() == SIGN_IN_PATH {
        return Ok(sign_in(&shared, &req));
    }
    let upgrade = is_upgrade(headers);
    let fetch = guard::FetchMeta {
        site: header_str(headers, HeaderName::from_static("sec-fetch-site")),
        mode: header_str(headers, HeaderName::from_static("sec-fetch-mode")),
        dest: header_str(headers, HeaderName::from_static("sec-fetch-dest")),
    };
    let allowed = guard::request_allowed(
        req.method(),
        upgrade,
        header_str(headers, header::ORIGIN),
        fetch,
        &shared.authority,
    );
    match allowed {
        Ok(()) => {}
        Err(guard::Refusal::OtherSite) => {
            return Ok(page(
                StatusCode::FORBIDDEN,
                pages::other_site(&shared.box_name),
            ));
        }
        Err(guard::Refusal::ForeignOrigin) => {
            return Ok(page(StatusCode::FORBIDDEN, pages::foreign_origin()));
        }
    }
    let cookies = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok());
    let session = session::find_cookie(cookies, session::COOKIE_NAME)
        .and_then(|sid| lock(&shared.sessions).use_session(sid, Moment::now()));
    let Some(session_end) = session else {
        return Ok(page(
            StatusCode::UNAUTHORIZED,
            pages::sign_in_needed(&shared.box_name),
        ));
    };
    Ok(forward(shared, req, upgrade, busy, session_end).await)
}

/// `GET /__box/sign-in?nonce=…`: a live nonce becomes a session cookie and a page that
/// moves on to `/`, replacing itself in the history so the nonce does not stay there.
///
/// Not a redirect: the browser usually arrives from the sign-in page on `file://`, an
/// opaque origin, so the navigation is cross-site, and a `SameSite=Strict` cookie set in
/// a redirect is not sent on the next hop of that same cross-site chain. The page's own
/// navigation to `/` is same-origin and carries it.
fn sign_in(shared: &Shared, req: &Request<Incoming>) -> Response<Body> {
    if req.method() != Method::GET {
        return page(
            StatusCode::METHOD_NOT_ALLOWED,
            pages::link_used(&shared.box_name),
        );
    }
    let nonce = req
        .uri()
        .query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix("nonce="))
        .unwrap_or("");
    let now = Moment::now();
    if !lock(&shared.nonces).redeem(nonce, now) {
        return page(StatusCode::UNAUTHORIZED, pages::link_used(&shared.box_name));
    }
    let (sid, max_age) = {
        let mut sessions = lock(&shared.sessions);
        (sessions.create(now), sessions.lifetimes.max_age)
    };
    let mut r = page(StatusCode::OK, pages::signed_in(&shared.box_name));
    let h = r.headers_mut();
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if let Ok(v) = HeaderValue::from_str(&session::set_cookie(&sid, max_age)) {
        h.insert(header::SET_COOKIE, v);
    }
    r
}

#[derive(Debug)]
enum SendError {
    Connect(std::io::Error),
    Http(hyper::Error),
    Request,
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Connect(e) => write!(f, "cannot connect: {e}"),
            Self::Http(e) => write!(f, "HTTP error: {e}"),
            Self::Request => f.write_str("the request cannot be forwarded"),
        }
    }
}

/// One request to Executor on a fresh loopback connection.
async fn send(
    upstream_port: u16,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    token: &BearerToken,
    body: Body,
) -> Result<Response<Incoming>, SendError> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", upstream_port))
        .await
        .map_err(SendError::Connect)?;
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(SendError::Http)?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!("upstream connection ended: {e}");
        }
    });
    let mut req = Request::new(body);
    *req.method_mut() = method.clone();
    *req.uri_mut() = path.parse().map_err(|_| SendError::Request)?;
    *req.headers_mut() = headers.clone();
    let mut auth = HeaderValue::from_str(&format!("Bearer {}", token.expose()))
        .map_err(|_| SendError::Request)?;
    auth.set_sensitive(true);
    req.headers_mut().insert(header::AUTHORIZATION, auth);
    sender.send_request(req).await.map_err(SendError::Http)
}

async fn forward(
    shared: Arc<Shared>,
    mut req: Request<Incoming>,
    upgrade: bool,
    busy: Busy,
    mut session_end: SessionEnd,
) -> Response<Body> {
    let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (parts, body) = req.into_parts();
    // Only a request without a body can be sent again after Executor refused the token.
    let replayable = body.is_end_stream();
    let headers = upstream_headers(
        &shared.cookies,
        shared.upstream_port,
        &shared.authority,
        &parts.headers,
        upgrade,
    );
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let Some(token) = shared.current_token() else {
        return page(
            StatusCode::BAD_GATEWAY,
            pages::upstream_down(&shared.box_name, "Executor's token could not be read."),
        );
    };
    let up = shared.upstream_port;
    let mut result = send(up, &parts.method, &path, &headers, &token, body.boxed()).await;
    if let Ok(r) = &result
        && r.status() == StatusCode::UNAUTHORIZED
        && let Some(fresh) = shared.refresh_after_refusal(&token).await
        && fresh != token
        && replayable
    {
        tracing::info!("Executor refused the old token; retrying with the re-read one");
        result = send(up, &parts.method, &path, &headers, &fresh, empty()).await;
    }
    let mut resp = match result {
        Ok(r) => r,
        Err(e) => return upstream_failed(&shared, e).await,
    };
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS
        && let Some(client_upgrade) = client_upgrade
    {
        let upstream_upgrade = hyper::upgrade::on(&mut resp);
        tokio::spawn(async move {
            // The spliced connection counts as activity for as long as it is open.
            let _busy = busy;
            match tokio::try_join!(client_upgrade, upstream_upgrade) {
                Ok((client, upstream)) => {
                    let (mut c, mut u) = (TokioIo::new(client), TokioIo::new(upstream));
                    // The connection ends with its session (expiry, --sign-out).
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut c, &mut u) => {}
                        _ = session_end.wait_for(|ended| *ended) => {}
                    }
                }
                Err(e) => tracing::debug!("upgrade failed: {e}"),
            }
        });
        let (mut parts, _) = resp.into_parts();
        downstream_headers(
            shared.upstream_port,
            &mut parts.headers,
            &shared.authority,
            true,
        );
        shared.cookies.learn(&mut parts.headers);
        return Response::from_parts(parts, empty());
    }
    let (mut parts, body) = resp.into_parts();
    downstream_headers(
        shared.upstream_port,
        &mut parts.headers,
        &shared.authority,
        false,
    );
    shared.cookies.learn(&mut parts.headers);
    // Frames are passed on as they arrive; the stream keeps the gateway busy until it ends,
    // and ends with its session.
    let body = body
        .map_frame(move |frame| {
            busy.touch();
            frame
        })
        .boxed();
    Response::from_parts(parts, EndsWithSession::wrap(body, session_end))
}

/// A response body that ends when its session ends (a streaming reply would otherwise
/// outlive an expired or signed-out session for as long as Executor keeps it open). A
/// small task waits for the session's end and wakes the connection, which then polls
/// this body and finds it over.
struct EndsWithSession {
    inner: Body,
    end: SessionEnd,
    waker: Arc<Mutex<Option<std::task::Waker>>>,
    watcher: tokio::task::JoinHandle<()>,
}

impl EndsWithSession {
    fn wrap(inner: Body, end: SessionEnd) -> Body {
        let waker: Arc<Mutex<Option<std::task::Waker>>> = Arc::default();
        let (mut ended, wake) = (end.clone(), Arc::clone(&waker));
        let watcher = tokio::spawn(async move {
            // An error means the session is gone: over as well.
            let _ = ended.wait_for(|e| *e).await;
            if let Some(w) = lock(&wake).take() {
                w.wake();
            }
        });
        Self {
            inner,
            end,
            waker,
            watcher,
        }
        .boxed()
    }
}

impl Drop for EndsWithSession {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

impl hyper::body::Body for EndsWithSession {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        *lock(&this.waker) = Some(cx.waker().clone());
        if *this.end.borrow() {
            return std::task::Poll::Ready(None);
        }
        std::pin::Pin::new(&mut this.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// Executor did not answer: if the box is no longer running, the gateway has nothing left
/// to do and stops.
async fn upstream_failed(shared: &Arc<Shared>, e: SendError) -> Response<Body> {
    tracing::warn!(
        "forwarding to Executor of '{}' failed: {e}",
        shared.box_name
    );
    let probe = Arc::clone(&shared.probe);
    let running = tokio::task::spawn_blocking(move || probe.running()).await;
    let detail = match running {
        Ok(Ok(false)) => {
            shared.stop(format!("box '{}' is no longer running", shared.box_name));
            format!(
                "Box '{}' is not running, so its gateway stopped. Start it with box start {}.",
                shared.box_name, shared.box_name
            )
        }
        _ => format!(
            "Executor on the box's port {} did not answer ({e}).",
            shared.upstream_port
        ),
    };
    page(
        StatusCode::BAD_GATEWAY,
        pages::upstream_down(&shared.box_name, &detail),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoBox;
    impl BoxProbe for NoBox {
        fn token(&self) -> anyhow::Result<BearerToken> {
            anyhow::bail!("no box")
        }
        fn running(&self) -> anyhow::Result<bool> {
            Ok(false)
        }
        fn registered(&self) -> bool {
            false
        }
    }

    fn shared() -> Shared {
        Shared::new(
            "alpha".into(),
            "box-alpha.localhost:5000".into(),
            4790,
            BearerToken::new("tok").unwrap(),
            Arc::new(NoBox),
            Lifetimes::default(),
        )
    }

    #[test]
    fn a_refused_box_stops_the_gateway_once() {
        let s = shared();
        let rx = s.shutdown.subscribe();
        s.stop("first");
        s.stop("second");
        assert_eq!(rx.borrow().as_deref(), Some("first"));
    }
}
