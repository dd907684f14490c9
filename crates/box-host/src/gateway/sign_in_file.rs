//! The sign-in page handed to the browser opener instead of the sign-in URL.
//!
//! An opener's argv, and the browser's it starts, can be read by every user of the host
//! (`/proc/<pid>/cmdline`, `ps`): a nonce there could be redeemed by someone else within
//! its minute. So the gateway writes a small HTML page, 0600 in a 0700 directory of its
//! own, that sends the browser on to the sign-in URL, and the opener only gets the page's
//! `file://` URL (Jupyter's `jupyter_server` does the same). The page is removed when its
//! nonce is redeemed or expires, and when the gateway stops.

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

use super::record;
use crate::state::StateDir;

/// `<state>/gateways/sign-in/`: 0700, only sign-in pages in it.
pub fn dir(state: &StateDir) -> PathBuf {
    record::dir(state).join("sign-in")
}

/// Writes the page for `url` (which carries a nonce) and returns its path. The name is
/// random: nothing about it says which nonce it holds.
pub fn write(state: &StateDir, box_name: &str, url: &str) -> Result<PathBuf> {
    let dir = dir(state);
    StateDir::ensure_private_dir(&dir)?;
    // An older directory may have been made with another mode: the pages are credentials.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("cannot make {} private", dir.display()))?;
    let path = dir.join(format!(
        "{box_name}-{}.html",
        &super::random::random_hex32()[..16]
    ));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot write the sign-in page {}", path.display()))?;
    f.write_all(page(box_name, url).as_bytes())
        .with_context(|| format!("cannot write the sign-in page {}", path.display()))?;
    Ok(path)
}

/// Removes the pages a gateway of `box_name` left behind (killed before it could clean
/// up): their nonces died with it.
pub fn remove_stale(state: &StateDir, box_name: &str) {
    let Ok(entries) = std::fs::read_dir(dir(state)) else {
        return;
    };
    let prefix = format!("{box_name}-");
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if let Some(rest) = name.strip_prefix(&prefix)
            && rest.len() == 16 + ".html".len()
            && rest.ends_with(".html")
        {
            remove(&e.path());
        }
    }
}

/// Removes a page; one already gone is fine.
pub fn remove(path: &Path) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!("cannot remove the sign-in page {}: {e}", path.display());
    }
}

/// The `file://` URL of `path` (percent-encoding everything but unreserved characters and
/// `/`), for the opener.
pub fn file_url(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt as _;
    let mut url = String::from("file://");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            url.push(char::from(b));
        } else {
            url.push_str(&format!("%{b:02X}"));
        }
    }
    url
}

/// A page that goes on to `url` at once (a script, a meta refresh where scripts are off,
/// and a link for a browser that follows neither). `url` is the gateway's own:
/// `http://box-<name>.localhost:<port>/…?nonce=<hex>`, nothing in it needs escaping.
fn page(box_name: &str, url: &str) -> String {
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\">\
         <meta name=\"referrer\" content=\"no-referrer\">\
         <meta http-equiv=\"refresh\" content=\"0;url={url}\">\
         <script>location.replace(\"{url}\")</script>\
         <title>Signing in to {box_name}</title></head>\
         <body><p>Signing in to the Executor UI of {box_name}&hellip; \
         <a href=\"{url}\">continue</a></p></body></html>\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_private_and_leads_to_the_url() {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::at(tmp.path().to_path_buf());
        // Any 16 of its digits turn up in the name's 16 random ones with odds of 2^-64.
        let nonce = "0123456789abcdef0123456789abcdef";
        let url = format!("http://box-alpha.localhost:5000/__box/sign-in?nonce={nonce}");
        let path = write(&state, "alpha", &url).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&dir(&state)), 0o700);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(&format!("content=\"0;url={url}\"")), "{text}");
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(!name.contains(&nonce[..16]), "{name}");
        remove(&path);
        assert!(!path.exists());
        remove(&path);
    }

    #[test]
    fn a_new_gateway_removes_only_its_boxs_stale_pages() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::at(tmp.path().to_path_buf());
        let url = "http://box-alpha.localhost:5000/__box/sign-in?nonce=ab";
        let alpha = write(&state, "alpha", url).unwrap();
        let alpha_two = write(&state, "alpha-two", url).unwrap();
        remove_stale(&state, "alpha");
        assert!(!alpha.exists());
        assert!(alpha_two.exists(), "another box's page");
    }

    #[test]
    fn file_urls_are_percent_encoded() {
        assert_eq!(
            file_url(Path::new("/home/a b/x#1?.html")),
            "file:///home/a%20b/x%231%3F.html"
        );
    }
}
