//! The guard around sequoia's OpenPGP parser: a panic inside it on hostile input becomes an
//! error, and the process's panic hooks (cleanup's removal of every temp) stay out of it.
//! Both the sequoia reader ([`super::crypto`]) and box's own ([`super::seipd`]) parse under
//! it; [`super::cleanup`] asks whether a panic is being contained.

use std::cell::Cell;
use std::panic::AssertUnwindSafe;

thread_local! {
    /// Set while [`contain_parser_panic`] runs, so the panic hook stays silent for a panic
    /// that is about to be turned into an error.
    static CONTAINING: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is inside [`contain_parser_panic`]: a panic there is turned into an
/// error, so the process's other panic hooks (cleanup's removal of every temp) must not act
/// on it.
pub(super) fn containing_panic() -> bool {
    CONTAINING.with(Cell::get)
}

/// Runs `f`, turning a panic into an error message. sequoia 2.4's parser panics on some
/// hostile inputs (an SEIPD packet shorter than its MDC reserve, i.e. a backup truncated
/// a few dozen bytes in); that must read as "corrupt or truncated", never crash `box`.
/// Needs `panic = "unwind"`, which the release profile keeps for this reason.
pub(super) fn contain_parser_panic<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    static QUIET_HOOK: std::sync::Once = std::sync::Once::new();
    QUIET_HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !CONTAINING.with(Cell::get) {
                default(info);
            }
        }));
    });
    CONTAINING.with(|c| c.set(true));
    let result = std::panic::catch_unwind(AssertUnwindSafe(f));
    CONTAINING.with(|c| c.set(false));
    result.map_err(|payload| {
        payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "the OpenPGP parser gave up".to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_inside_becomes_its_message_and_the_guard_is_lifted() {
        let out: Result<(), String> = contain_parser_panic(|| panic!("short SEIPD packet"));
        assert_eq!(out, Err("short SEIPD packet".to_string()));
        assert!(!containing_panic(), "the guard outlived the call");
        let owned: Result<(), String> = contain_parser_panic(|| panic!("{} bytes", 3));
        assert_eq!(owned, Err("3 bytes".to_string()));
        assert_eq!(contain_parser_panic(|| 7), Ok(7));
        assert_eq!(contain_parser_panic(containing_panic), Ok(true));
    }
}
