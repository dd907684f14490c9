//! What `BOX_SSH_COMMAND` may add to box's ssh: anything that says how to reach and log in
//! to the host (`-F`, `-i`, `-J`, `-l`, `-o User=…`, `-v`), nothing that forwards the
//! laptop's agent, X11 display or ports to the remote, and nothing that moves or drives the
//! control socket box manages.
//!
//! box puts its own `-o` options first, and for an `-o` option ssh keeps the first value;
//! but ssh's letter flags set their option whatever came before (`-A` after
//! `-o ForwardAgent=no` forwards the agent, `-S` moves the socket), so those are refused
//! here, and the `-o` spellings with them: one rule, whichever way the user wrote it.
//! The words are read as ssh's own `getopt` reads them (clustered flags `-TA`, glued
//! arguments `-S/path`, `-oKey=value`, `-o 'Key value'`, keys in any case).

/// ssh's letter flags that take an argument (OpenSSH 9's getopt string; `-P` takes a tag
/// since 9.4 and is read as taking one, which only makes the check stricter).
const TAKES_ARGUMENT: &str = "bceilmopBDEFIJLOPQRSwW";

/// Letter flags refused, with what they would do.
const REFUSED_FLAGS: &[(char, &str)] = &[
    ('A', "forwards your ssh agent to the remote"),
    ('X', "forwards your X11 display to the remote"),
    ('Y', "forwards your X11 display to the remote, trusted"),
    ('S', "moves the control socket box manages"),
    ('M', "makes each call a control master of its own"),
    ('O', "sends a command to the control master box manages"),
    ('L', "forwards a local port"),
    ('R', "forwards a port of the remote to this machine"),
    ('D', "opens a SOCKS proxy on this machine"),
    ('W', "replaces the session with a forwarded connection"),
    ('w', "forwards a tunnel device"),
    (
        't',
        "gives each call a terminal on the remote, which echoes back what box sends on stdin (API keys)",
    ),
];

/// `-o` option names refused (compared without case), with what they would do.
const REFUSED_OPTIONS: &[(&str, &str)] = &[
    ("ForwardAgent", "forwards your ssh agent to the remote"),
    ("ForwardX11", "forwards your X11 display to the remote"),
    (
        "ForwardX11Trusted",
        "trusts the remote with your X11 display",
    ),
    ("ControlPath", "moves the control socket box manages"),
    ("ControlMaster", "changes how box shares its one connection"),
    ("ControlPersist", "changes how long box's connection lives"),
    ("LocalForward", "forwards a local port"),
    (
        "RemoteForward",
        "forwards a port of the remote to this machine",
    ),
    ("DynamicForward", "opens a SOCKS proxy on this machine"),
    ("GatewayPorts", "opens forwarded ports to other machines"),
    ("ClearAllForwardings", "changes the forwardings box clears"),
    ("Tunnel", "forwards a tunnel device"),
    ("TunnelDevice", "forwards a tunnel device"),
    (
        "RequestTTY",
        "gives each call a terminal on the remote, which echoes back what box sends on stdin (API keys)",
    ),
];

/// Refuses a `BOX_SSH_COMMAND` (its words, the program first) that turns on forwarding or
/// touches the control socket; the message names the word and what it would do.
pub fn check(words: &[String]) -> Result<(), String> {
    let mut rest = words.iter().skip(1);
    while let Some(word) = rest.next() {
        let Some(flags) = word.strip_prefix('-') else {
            continue; // a destination or an option's separate argument
        };
        if flags.is_empty() || flags == "-" {
            continue;
        }
        for (i, letter) in flags.char_indices() {
            if let Some((_, why)) = REFUSED_FLAGS.iter().find(|(l, _)| *l == letter) {
                return Err(refusal(&format!("-{letter}"), why));
            }
            if TAKES_ARGUMENT.contains(letter) {
                let glued = &flags[i + letter.len_utf8()..];
                let argument = if glued.is_empty() {
                    // A separate argument that looks like flags is read as flags too: a
                    // stricter reading never lets a flag through.
                    match rest.clone().next() {
                        Some(next) if !next.starts_with('-') => rest.next().map(String::as_str),
                        _ => None,
                    }
                } else {
                    Some(glued)
                };
                if letter == 'o'
                    && let Some(option) = argument
                {
                    check_option(option)?;
                }
                break;
            }
        }
    }
    Ok(())
}

/// One `-o` argument: `Key=value`, `Key value` or `Key = value`.
fn check_option(option: &str) -> Result<(), String> {
    let key = option
        .trim_start()
        .split(|c: char| c == '=' || c.is_whitespace())
        .next()
        .unwrap_or("");
    match REFUSED_OPTIONS
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(key))
    {
        Some((name, why)) => Err(refusal(&format!("-o {name}"), why)),
        None => Ok(()),
    }
}

fn refusal(word: &str, why: &str) -> String {
    format!(
        "BOX_SSH_COMMAND may not set {word}: it {why}. box turns agent, X11 and port forwarding off and manages its own control socket; remove {word} from BOX_SSH_COMMAND (put host settings in an ssh config file, `ssh -F FILE`)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        crate::remote::quote::split_words(s).unwrap()
    }

    #[test]
    fn forwarding_and_control_words_are_refused_and_named() {
        for (command, named) in [
            ("ssh -A", "-A"),
            ("ssh -X", "-X"),
            ("ssh -Y", "-Y"),
            ("ssh -S /tmp/elsewhere", "-S"),
            ("ssh -S/tmp/elsewhere", "-S"),
            ("ssh -M", "-M"),
            ("ssh -TA", "-A"),
            ("ssh -tt", "-t"),
            ("ssh -o RequestTTY=force", "-o RequestTTY"),
            ("ssh -vvA -F cfg", "-A"),
            ("ssh -F cfg -A", "-A"),
            ("ssh -L 8080:localhost:80", "-L"),
            ("ssh -R 9000:localhost:22", "-R"),
            ("ssh -D 1080", "-D"),
            ("ssh -O exit", "-O"),
            ("ssh -o ForwardAgent=yes", "-o ForwardAgent"),
            ("ssh -oForwardAgent=yes", "-o ForwardAgent"),
            ("ssh -o forwardagent=yes", "-o ForwardAgent"),
            ("ssh -o 'ForwardAgent yes'", "-o ForwardAgent"),
            ("ssh -o ' ForwardAgent = yes'", "-o ForwardAgent"),
            ("ssh -o ForwardX11=yes", "-o ForwardX11"),
            ("ssh -o ForwardX11Trusted=yes", "-o ForwardX11Trusted"),
            ("ssh -o ControlPath=/tmp/x", "-o ControlPath"),
            ("ssh -o ControlMaster=auto", "-o ControlMaster"),
            ("ssh -o ControlPersist=10m", "-o ControlPersist"),
            (
                "ssh -o RemoteForward='9000 localhost:22'",
                "-o RemoteForward",
            ),
            ("ssh -vo ForwardAgent=yes", "-o ForwardAgent"),
            // A flag where an argument was expected is still read as a flag.
            ("ssh -l -A", "-A"),
        ] {
            let err = check(&words(command)).expect_err(command);
            assert!(
                err.starts_with(&format!("BOX_SSH_COMMAND may not set {named}: it ")),
                "{command}: {err}"
            );
            assert!(err.contains("remove"), "{command}: {err}");
        }
    }

    #[test]
    fn what_says_how_to_reach_the_host_is_kept() {
        for command in [
            "ssh",
            "/usr/bin/ssh -F ./ssh_config",
            "ssh -i ~/.ssh/box_ed25519 -l me -J jump.example",
            "ssh -v -4 -C",
            "ssh -o User=me -o IdentitiesOnly=yes -o Port=2222",
            "ssh -o ProxyJump=bastion -o StrictHostKeyChecking=yes",
            "ssh -a -x",
            // Arguments are not flags: a config file or a login name with A, S or X in it.
            "ssh -F /home/Alex/SSH/X.conf -l AXS",
            "ssh -o UserKnownHostsFile=/tmp/-A",
            "ssh -E /tmp/ssh-A.log",
        ] {
            assert_eq!(check(&words(command)), Ok(()), "{command}");
        }
    }
}
