//! Putting a box's software in place, shared by `box new` and `box repair` (and usable by
//! `box load`): copy the config, `provision/` and hb in, run `provision.sh` with live
//! progress, run `hb init` and `hb wire-mcp`, then the guest and host health checks.
//! Nothing here touches the contents of `/data`; hb owns that.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use box_proto::BoxEnv;

use super::guest::{self, GUEST_CONFIG, HB_PATH, PROVISION_DIR};
use super::guest_assets::{self, GuestArch};
use super::guest_network::GuestNetwork;
use crate::smolvm::{ExecOpts, Stream, timeouts};
use crate::ui;
use crate::ui::progress::{StepProgress, mmss};

use super::setup::Setup;

impl Setup<'_> {
    /// Config, provisioning files and hb into the guest. hb goes last and appears
    /// atomically: the workload launcher starts it as soon as it is executable, and it
    /// reads the config.
    pub fn install_assets(&mut self) -> Result<()> {
        let uname = self.exec_ok("uname -m", &["uname", "-m"], timeouts::EXEC)?;
        let arch = GuestArch::from_uname(&uname)?;
        let hb_local = guest_assets::hb_binary(arch)?;
        let provision = guest_assets::provision_dir()?;
        ui::say(format!(
            "Copying hb ({}) and provision/ into '{}'",
            arch.as_str(),
            self.machine
        ));
        self.transcript.line(&format!("hb: {}", hb_local.display()));
        self.transcript
            .line(&format!("provision: {}", provision.display()));

        // The rendered config holds no secret, but is written 0600 anyway, then removed.
        let env_file =
            self.state
                .root()
                .join(format!(".box-env-{}-{}", self.machine, std::process::id()));
        let copied = (|| -> Result<()> {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&env_file)
                .with_context(|| format!("cannot write {}", env_file.display()))?;
            f.write_all(effective(self.env).render().as_bytes())
                .with_context(|| format!("cannot write {}", env_file.display()))?;
            drop(f);
            Ok(self.smolvm.copy_in_cancellable(
                &env_file,
                self.machine,
                GUEST_CONFIG,
                self.cancel,
            )?)
        })();
        let _ = std::fs::remove_file(&env_file);
        copied?;
        self.exec_ok(
            "config ownership",
            &[
                "sh",
                "-c",
                &format!("chown root:root {GUEST_CONFIG} && chmod 0644 {GUEST_CONFIG}"),
            ],
            timeouts::EXEC,
        )?;
        // Proxies and CA certificates before provisioning, which trusts and exports them.
        let network =
            GuestNetwork::from_host(self.env, self.smolvm.host(), |k| std::env::var(k).ok())?;
        ui::say(format!(
            "Network for '{}': {}",
            self.machine,
            network.summary()
        ));
        self.transcript
            .line(&format!("network: {}", network.summary()));
        network.install(self)?;
        for (path, rel) in guest_assets::files_under(&provision)? {
            self.smolvm.copy_in_cancellable(
                &path,
                self.machine,
                &format!("{PROVISION_DIR}/{rel}"),
                self.cancel,
            )?;
        }
        // Scripts keep their executable bit (cp before 1.9 has no --mode).
        self.exec_ok(
            "provision modes",
            &[
                "sh",
                "-c",
                &format!("find {PROVISION_DIR} -name '*.sh' -exec chmod 0755 {{}} +"),
            ],
            timeouts::EXEC,
        )?;
        let size = std::fs::metadata(&hb_local)
            .with_context(|| format!("cannot read {}", hb_local.display()))?
            .len();
        let staged = format!("{HB_PATH}.new");
        self.smolvm
            .copy_in_cancellable(&hb_local, self.machine, &staged, self.cancel)?;
        self.exec_ok(
            "install hb",
            &[
                "sh",
                "-c",
                &format!(
                    "test \"$(stat -c %s {staged})\" = {size} || {{ echo 'hb arrived truncated' >&2; exit 1; }}; chmod 0755 {staged} && mv -f {staged} {HB_PATH}"
                ),
            ],
            timeouts::EXEC,
        )?;
        Ok(())
    }

    /// Runs `provision.sh` streamed: step names with elapsed time on the terminal, every
    /// line in the transcript.
    pub fn provision(&mut self) -> Result<()> {
        self.provision_steps(None)
    }

    /// [`Self::provision`] limited to the named steps of provision.sh (`PROVISION_STEPS`):
    /// a base build skips what is per box, a box made from a base runs only that.
    pub fn provision_steps(&mut self, steps: Option<&str>) -> Result<()> {
        ui::say(format!(
            "Provisioning '{}' (transcript: {})",
            self.machine,
            self.transcript.path().display()
        ));
        let mut progress = StepProgress::new();
        let transcript = &mut *self.transcript;
        transcript.line("--- provision.sh");
        let mut on_line = |_s: Stream, line: &str| {
            transcript.line(line);
            progress.feed(line);
        };
        let script = format!("{PROVISION_DIR}/provision.sh");
        let out = self.smolvm.exec(
            self.machine,
            &["/bin/bash", &script],
            ExecOpts {
                env: steps
                    .map(|s| vec![("PROVISION_STEPS".to_string(), s.to_string())])
                    .unwrap_or_default(),
                timeout: Some(timeouts::PROVISION),
                on_line: Some(&mut on_line),
                cancel: self.cancel,
            },
        );
        let secs = progress.done();
        let out = out?;
        if !out.success() {
            bail!(
                "provisioning failed after {} ({}){}",
                mmss(secs),
                guest::status(&out),
                guest::last_lines(&out.stderr, &out.stdout)
            );
        }
        ui::say(format!("Provisioned in {}", mmss(secs)));
        Ok(())
    }

    /// `hb <args>`, which must succeed; output into the transcript.
    pub fn hb_step(&mut self, args: &[&str]) -> Result<()> {
        let label = format!("hb {}", args.join(" "));
        ui::say(&label);
        let out = guest::hb_cancellable(
            self.smolvm,
            self.machine,
            args,
            Duration::from_secs(300),
            self.cancel,
        )?;
        self.transcript.block(&label, &out.stdout);
        self.transcript
            .block(&format!("{label} (stderr)"), &out.stderr);
        if !out.success() {
            bail!(
                "`{label}` in box '{}' failed ({}){}",
                self.machine,
                guest::status(&out),
                guest::last_lines(&out.stderr, &out.stdout)
            );
        }
        Ok(())
    }

    /// `hb init`, `hb up` (with Executor) and, when Executor is wired, `hb wire-mcp`. A new
    /// box (`new_box`) has its Hermes services seeded from HERMES_SERVICES at that init; a
    /// box with a /data of its own keeps its set.
    pub fn runtime(&mut self, new_box: bool) -> Result<()> {
        if new_box {
            self.hb_step(&["init", "--seed-services"])?;
        } else {
            self.hb_step(&["init"])?;
        }
        if self.env.install_executor {
            // Starts Executor under the workload and waits until it answers; wire-mcp
            // then reads the token it uses.
            self.hb_step(&["up"])?;
        }
        if self.env.install_executor && self.env.wire_executor_mcp {
            self.hb_step(&["wire-mcp"])?;
        }
        Ok(())
    }

    /// Guest `hb doctor`, then the MCP handshake from the host through `port`.
    pub fn health(&mut self, port: Option<u16>) -> Result<()> {
        self.hb_step(&["doctor"])?;
        match port {
            Some(port) if self.env.install_executor => {
                let token = guest::read_token(self.smolvm, self.machine)?;
                let reach = self.smolvm.reach_port(port)?;
                let reached = reach.local_port();
                let healthy = guest::host_handshake(reached, &token, 30, self.cancel)?;
                let over = if reached == port {
                    String::new()
                } else {
                    format!(" (the box's port {port}, through the ssh connection)")
                };
                ui::say(format!(
                    "host Executor MCP: healthy on http://127.0.0.1:{reached}{over} ({} {})",
                    healthy.server.name, healthy.server.version
                ));
            }
            _ => ui::say("host endpoint check skipped: web exposure is off"),
        }
        Ok(())
    }
}

/// The configuration the guest gets: without Executor there is nothing to wire or expose,
/// so those keys are rendered off rather than left to contradict INSTALL_EXECUTOR=0.
pub fn effective(env: &BoxEnv) -> BoxEnv {
    let mut env = env.clone();
    if !env.install_executor {
        env.wire_executor_mcp = false;
        env.expose_executor_web = false;
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_executor_means_no_wiring_and_no_web() {
        let env = BoxEnv {
            install_executor: false,
            ..BoxEnv::default()
        };
        let text = effective(&env).render();
        assert!(text.contains("WIRE_EXECUTOR_MCP=0"), "{text}");
        assert!(text.contains("EXPOSE_EXECUTOR_WEB=0"), "{text}");
        let text = effective(&BoxEnv::default()).render();
        assert!(text.contains("WIRE_EXECUTOR_MCP=1"), "{text}");
    }
}
