//! Quoting for the remote POSIX shell, and splitting `BOX_SSH_COMMAND` (and
//! `BOX_PASSPHRASE_COMMAND`) into words.
//!
//! ssh joins its command words with spaces and hands the result to the remote account's
//! shell, so every word box sends is single-quoted: inside `'…'` nothing is special except
//! `'` itself, written `'\''`.

/// `word` as one single-quoted word of a POSIX shell.
pub fn quote(word: &str) -> String {
    let mut out = String::with_capacity(word.len() + 2);
    out.push('\'');
    for c in word.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// The words joined into one command line, each quoted.
pub fn command_line<S: AsRef<str>>(words: &[S]) -> String {
    words
        .iter()
        .map(|w| quote(w.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Splits a command the way git splits `GIT_SSH_COMMAND` for the common cases: words
/// separated by blanks, `'…'` and `"…"` group (a backslash escapes in `"…"` and outside
/// quotes). Refuses an unterminated quote rather than guessing.
pub fn split_words(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(format!("unterminated ' in {text:?}")),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err(format!("unterminated \" in {text:?}")),
                        },
                        Some(c) => word.push(c),
                        None => return Err(format!("unterminated \" in {text:?}")),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => word.push(c),
                    None => return Err(format!("a trailing backslash in {text:?}")),
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    if words.is_empty() {
        return Err("it holds no command".into());
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTILE: &[&str] = &[
        "",
        "plain",
        "two words",
        "it's",
        "''",
        "'\\''",
        "$(touch /tmp/box-quote-pwned)",
        "`id`",
        "a;b && c || d | e",
        "line\nbreak\n",
        "*?[a-z]{x,y}~",
        "$HOME ${IFS} $1 $@ $*",
        "\\ \\\\ \\n \"dq\"",
        "tab\there",
        "-n",
        "#comment",
        "ünïcødé ✓",
        "!history !!",
    ];

    /// Every word comes out of a real `sh -c` exactly as it went in, and nothing runs.
    #[test]
    fn hostile_words_round_trip_through_a_real_shell() {
        let dir = tempfile::tempdir().unwrap();
        let script = format!(
            "cd {} && for w in {}; do printf '%s\\0' \"$w\"; done",
            quote(&dir.path().to_string_lossy()),
            command_line(HOSTILE)
        );
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(&script)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let got: Vec<String> = out
            .stdout
            .split(|b| *b == 0)
            .map(|w| String::from_utf8(w.to_vec()).unwrap())
            .collect();
        assert_eq!(got[..got.len() - 1], *HOSTILE);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert!(!Path::new("/tmp/box-quote-pwned").exists());
    }

    /// The same through bash, the login shell most remote accounts have.
    #[test]
    fn hostile_words_round_trip_through_bash_too() {
        if !Path::new("/bin/bash").exists() {
            return;
        }
        for w in HOSTILE {
            let out = std::process::Command::new("/bin/bash")
                .arg("-c")
                .arg(format!("printf %s {}", quote(w)))
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout), *w);
        }
    }

    use std::path::Path;

    #[test]
    fn splits_ssh_commands_like_git() {
        assert_eq!(split_words("ssh").unwrap(), ["ssh"]);
        assert_eq!(
            split_words("  ssh -F ./cfg\t-o 'ProxyJump=a b' ").unwrap(),
            ["ssh", "-F", "./cfg", "-o", "ProxyJump=a b"]
        );
        assert_eq!(
            split_words(r#"/opt/my\ ssh -i "/k/my \"key\"""#).unwrap(),
            ["/opt/my ssh", "-i", "/k/my \"key\""]
        );
        assert_eq!(split_words("ssh -o ''").unwrap(), ["ssh", "-o", ""]);
        assert!(split_words("ssh 'open").is_err());
        assert!(split_words("ssh \"open").is_err());
        assert!(split_words("   ").is_err());
    }
}
