//! A user's box.env read as the original tool's `source` read it: a value is shell words
//! (unquoted text, `'…'` taken literally, `"…"` with `$` expansion and `\` escapes, pieces
//! side by side joined), `$NAME`, `${NAME}` and `${NAME:-word}`/`${NAME-word}` expanded from
//! the file's earlier lines and then the environment, and a `# comment` after the value.
//!
//! It is read, never run: command substitution (`$(…)`, backquotes), arithmetic and other
//! parameter forms are refused, naming what was found. A variable that looks like a secret
//! (`*_KEY`, `*_TOKEN`, `*SECRET*`, `*PASSWORD*`, `*PASSPHRASE*`) is never expanded: box.env
//! values are written into every box's `/etc/hermes-box.env`, where an API key must not go
//! (`CREDENTIALS` binds one to hosts without the guest seeing it).

/// Where `$NAME` is looked up: the file's earlier assignments first, as a shell reading the
/// file would see them, then the environment.
pub trait Variables {
    fn lookup(&self, name: &str) -> Option<String>;
}

impl<F: Fn(&str) -> Option<String>> Variables for F {
    fn lookup(&self, name: &str) -> Option<String> {
        self(name)
    }
}

/// How deep `${A:-${B:-…}}` may nest, so a hostile line cannot recurse without end.
const MAX_NESTING: usize = 8;

/// The value of the text after `KEY=`, as `source` would assign it.
pub fn value(raw: &str, vars: &dyn Variables) -> Result<String, String> {
    let mut reader = Reader {
        chars: raw.chars().collect(),
        at: 0,
        vars,
    };
    let out = reader.word(0, None)?;
    let rest: String = reader.chars[reader.at..].iter().collect();
    let rest = rest.trim_start();
    if rest.is_empty() || rest.starts_with('#') {
        Ok(out)
    } else {
        Err(format!(
            "a value with spaces must be quoted (the shell would run '{}' as a command)",
            rest.chars().take(40).collect::<String>().escape_debug()
        ))
    }
}

/// Whether a variable's name says it holds a secret box.env must not copy into a box.
pub fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper.ends_with("_KEY")
        || upper.ends_with("_TOKEN")
        || ["SECRET", "PASSWORD", "PASSPHRASE"]
            .iter()
            .any(|w| upper.contains(w))
}

struct Reader<'a> {
    chars: Vec<char>,
    at: usize,
    vars: &'a dyn Variables,
}

impl Reader<'_> {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    /// One word: until unquoted whitespace (or `stop`, the `}` closing a `${…:-word}`).
    fn word(&mut self, depth: usize, stop: Option<char>) -> Result<String, String> {
        let mut out = String::new();
        while let Some(c) = self.peek() {
            if c.is_whitespace() || Some(c) == stop {
                break;
            }
            self.at += 1;
            match c {
                '\'' => out.push_str(&self.single_quoted()?),
                '"' => out.push_str(&self.double_quoted(depth)?),
                '\\' => match self.peek() {
                    Some(next) => {
                        self.at += 1;
                        out.push(next);
                    }
                    None => return Err("ends with a lone backslash".into()),
                },
                '$' => out.push_str(&self.dollar(depth)?),
                '`' => return Err(command_substitution()),
                c => out.push(c),
            }
        }
        Ok(out)
    }

    fn single_quoted(&mut self) -> Result<String, String> {
        let mut out = String::new();
        loop {
            match self.peek() {
                Some('\'') => {
                    self.at += 1;
                    return Ok(out);
                }
                Some(c) => {
                    self.at += 1;
                    out.push(c);
                }
                None => return Err("unbalanced ' quote".into()),
            }
        }
    }

    fn double_quoted(&mut self, depth: usize) -> Result<String, String> {
        let mut out = String::new();
        loop {
            let Some(c) = self.peek() else {
                return Err("unbalanced \" quote".into());
            };
            self.at += 1;
            match c {
                '"' => return Ok(out),
                // Inside double quotes a backslash escapes only these, as in the shell.
                '\\' => match self.peek() {
                    Some(next @ ('$' | '`' | '"' | '\\')) => {
                        self.at += 1;
                        out.push(next);
                    }
                    _ => out.push('\\'),
                },
                '$' => out.push_str(&self.dollar(depth)?),
                '`' => return Err(command_substitution()),
                c => out.push(c),
            }
        }
    }

    /// After a `$`: a name, `{…}`, or a `$` the shell leaves as it is.
    fn dollar(&mut self, depth: usize) -> Result<String, String> {
        match self.peek() {
            Some('{') => {
                self.at += 1;
                self.braced(depth)
            }
            Some('(') => Err(command_substitution()),
            Some(c) if c.is_ascii_alphabetic() || c == '_' => {
                let name = self.name();
                self.expand(&name)
            }
            Some(c) if c.is_ascii_digit() || "?#@*!$-".contains(c) => Err(format!(
                "'${c}' is a shell's special parameter, which box.env cannot have"
            )),
            _ => Ok("$".into()),
        }
    }

    fn name(&mut self) -> String {
        let mut name = String::new();
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || c == '_' {
                name.push(c);
                self.at += 1;
            } else {
                break;
            }
        }
        name
    }

    /// `${NAME}`, `${NAME:-word}` (the word when NAME is unset or empty), `${NAME-word}`
    /// (when unset).
    fn braced(&mut self, depth: usize) -> Result<String, String> {
        if depth >= MAX_NESTING {
            return Err(format!("'${{' nested more than {MAX_NESTING} deep"));
        }
        let name = self.name();
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
            return Err("'${' without a variable name (box.env reads only ${NAME} forms)".into());
        }
        let when_empty_too = match (self.peek(), self.chars.get(self.at + 1)) {
            (Some('}'), _) => {
                self.at += 1;
                return self.expand(&name);
            }
            (Some(':'), Some('-')) => {
                self.at += 2;
                true
            }
            (Some('-'), _) => {
                self.at += 1;
                false
            }
            _ => {
                return Err(format!(
                    "'${{{name}' is followed by a form box.env does not read (only ${{{name}}}, ${{{name}:-word}} and ${{{name}-word}})"
                ));
            }
        };
        let fallback = self.word(depth + 1, Some('}'))?;
        if self.peek() != Some('}') {
            return Err(format!("'${{{name}' is not closed with '}}'"));
        }
        self.at += 1;
        let current = self.lookup(&name)?;
        Ok(match current {
            Some(v) if !(when_empty_too && v.is_empty()) => v,
            _ => fallback,
        })
    }

    fn lookup(&self, name: &str) -> Result<Option<String>, String> {
        if looks_secret(name) {
            return Err(format!(
                "${name} looks like a secret and is not expanded: box.env values are written \
                 into every box; bind an API key with CREDENTIALS instead"
            ));
        }
        Ok(self.vars.lookup(name))
    }

    /// An unset variable is empty, as in the shell.
    fn expand(&self, name: &str) -> Result<String, String> {
        Ok(self.lookup(name)?.unwrap_or_default())
    }
}

fn command_substitution() -> String {
    "command substitution ($(…) or `…`) is not run: box.env is read, never executed".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(name: &str) -> Option<String> {
        match name {
            "HOME" => Some("/home/u".into()),
            "EMPTY" => Some(String::new()),
            "OPENAI_API_KEY" => Some("sk-secret".into()),
            _ => None,
        }
    }

    fn read(raw: &str) -> Result<String, String> {
        value(raw, &vars)
    }

    #[test]
    fn reads_what_source_would_assign() {
        for (raw, want) in [
            ("plain", "plain"),
            ("\"quoted\"", "quoted"),
            ("'$HOME literal'", "$HOME literal"),
            ("\"\"   # native-installer release channel", ""),
            ("\"--skip-browser\"   # headless", "--skip-browser"),
            ("$HOME/.box", "/home/u/.box"),
            ("\"${HOME}/x y\"", "/home/u/x y"),
            ("${UNSET:-22}", "22"),
            ("${EMPTY:-22}", "22"),
            ("${EMPTY-22}", ""),
            ("${UNSET-${HOME}}", "/home/u"),
            ("$UNSET", ""),
            ("a\"b\"'c'", "abc"),
            ("\"a\\$b\\\"c\\n\"", "a$b\"c\\n"),
            ("cost\\ $", "cost $"),
            ("4 # four", "4"),
            ("", ""),
        ] {
            assert_eq!(read(raw).as_deref(), Ok(want), "{raw}");
        }
    }

    #[test]
    fn refuses_what_it_would_have_to_run_or_guess() {
        for (raw, words) in [
            ("$(id)", "command substitution"),
            ("\"`id`\"", "command substitution"),
            ("a b", "must be quoted"),
            ("\"open", "unbalanced \" quote"),
            ("'open", "unbalanced ' quote"),
            ("$1", "special parameter"),
            ("${#HOME}", "without a variable name"),
            ("${HOME/u/v}", "form box.env does not read"),
            ("${HOME:-x", "not closed"),
            ("$OPENAI_API_KEY", "looks like a secret"),
            ("${OPENAI_API_KEY:-x}", "looks like a secret"),
            ("trailing\\", "lone backslash"),
        ] {
            let err = read(raw).unwrap_err();
            assert!(err.contains(words), "{raw}: {err}");
        }
        let deep = format!("{}x{}", "${A:-".repeat(20), "}".repeat(20));
        assert!(read(&deep).unwrap_err().contains("nested"));
    }

    #[test]
    fn secret_names() {
        for name in [
            "OPENAI_API_KEY",
            "GITHUB_TOKEN",
            "BOX_PASSPHRASE",
            "DB_PASSWORD",
            "my_secret",
        ] {
            assert!(looks_secret(name), "{name}");
        }
        for name in ["HOME", "KEYBOARD", "TOKENS_DIR", "NODE_MAJOR"] {
            assert!(!looks_secret(name), "{name}");
        }
    }
}
