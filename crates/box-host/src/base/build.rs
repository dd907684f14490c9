//! `box base build [--refresh]`: create a builder machine, provision it without anything
//! per box, check it holds no user state, stop it, `pack create --from-vm` it into the
//! store, delete the builder. One build at a time (the `base` lock): a second build waits,
//! then finds the base the first one made. A failure or a signal deletes the builder and
//! every temporary file; the store never shows a half-built base.

use std::time::Instant;

use anyhow::{Result, anyhow, bail};

use super::guest_prep::{self, BASE_STEPS, BASE_WORKLOAD};
use super::key::BaseKey;
use super::store::{BaseMeta, Store, human_age};
use crate::context::Context;
use crate::lifecycle::guest;
use crate::lifecycle::setup::Setup;
use crate::lifecycle::signals::DeferredSignals;
use crate::lifecycle::transcript::Transcript;
use crate::smolvm::{
    CreateFromSpec, CreateSpec, ExecOpts, Smolvm, SmolvmVersion, Stream, timeouts,
};
use crate::state::{LockGuard, LockKey, locks};
use crate::ui;

/// What a build ended with.
pub enum Built {
    /// A base for this key was already there and fresh (or another build made it while we
    /// waited for the lock).
    Existing(BaseMeta),
    New(BaseMeta),
}

/// Waits (politely, saying who holds it) for the base lock.
pub fn wait_for_lock(ctx: &Context, operation: &str) -> Result<LockGuard> {
    let started = Instant::now();
    let mut told = false;
    loop {
        match locks::try_acquire(&ctx.state, LockKey::Base, operation) {
            Ok(g) => return Ok(g),
            Err(locks::LockError::Busy { holder, .. }) => {
                if !told {
                    ui::say(format!("Waiting for {holder} to finish building the base"));
                    told = true;
                }
                if started.elapsed() > timeouts::PROVISION + timeouts::PACK {
                    bail!("gave up waiting for the base lock held by {holder}");
                }
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
            Err(locks::LockError::Io(e)) => return Err(e),
        }
    }
}

/// Builds (or finds) the base for the current configuration.
pub fn build(ctx: &Context, refresh: bool) -> Result<Built> {
    let env = &ctx.config.env;
    let key = BaseKey::current(env, &crate::lifecycle::test_guest_env::from_env())?;
    let digest = key.digest();
    // The base lives where smolvm runs: packs are made and read by that host's smolvm.
    let smolvm = ctx.selected_smolvm();
    let store = Store::for_smolvm(&ctx.state, &smolvm)?;
    store.ensure()?;
    let asked = Instant::now();
    let _lock = wait_for_lock(ctx, &format!("box base build ({digest})"))?;
    store.sweep_killed_builds();
    if let Some(meta) = store.find(&key)? {
        let fresh = !meta.is_stale(env.base_max_age_days);
        // A base finished while we waited counts as refreshed.
        let made_while_waiting = meta.age() < asked.elapsed();
        if (fresh && !refresh) || made_while_waiting {
            return Ok(Built::Existing(meta));
        }
        ui::say(format!(
            "Rebuilding base {digest} (built {} ago)",
            human_age(meta.age())
        ));
    }
    let mut b = Builder::new(ctx, key, smolvm)?;
    let res = b.run(&store);
    b.cleanup(&store);
    res.map(Built::New)
}

struct Builder<'a> {
    ctx: &'a Context,
    key: BaseKey,
    digest: String,
    smolvm: Smolvm,
    signals: DeferredSignals,
    machine: String,
    transcript: Transcript,
    created: bool,
}

impl<'a> Builder<'a> {
    fn new(ctx: &'a Context, key: BaseKey, smolvm: Smolvm) -> Result<Self> {
        let digest = key.digest();
        let machine = format!("box-base-{}-{}", &digest[..8], std::process::id());
        Ok(Self {
            ctx,
            transcript: Transcript::create(&ctx.state, &machine, "base-build")?,
            key,
            digest,
            smolvm,
            signals: DeferredSignals::install()?,
            machine,
            created: false,
        })
    }

    fn checkpoint(&self) -> Result<()> {
        match self.signals.pending() {
            Some(sig) => Err(anyhow!("interrupted by {}", DeferredSignals::name(sig))),
            None => Ok(()),
        }
    }

    fn setup(&mut self) -> Setup<'_> {
        Setup {
            smolvm: &self.smolvm,
            state: &self.ctx.state,
            env: &self.ctx.config.env,
            machine: &self.machine,
            transcript: &mut self.transcript,
            cancel: Some(self.signals.flag()),
        }
    }

    fn run(&mut self, store: &Store) -> Result<BaseMeta> {
        let t0 = Instant::now();
        let env = &self.ctx.config.env;
        let version = self.smolvm.version()?;
        crate::lifecycle::guest_assets::preflight()?;
        ui::say(format!(
            "Building base {} from {} in machine '{}' (transcript: {})",
            self.digest,
            env.base_image,
            self.machine,
            self.transcript.path().display()
        ));
        if self.smolvm.find(&self.machine)?.is_some() {
            bail!(
                "smolvm machine '{}' already exists; box never touches a machine it did not create",
                self.machine
            );
        }
        // The LAN closed (as for every box), the internet open: provisioning needs the
        // latter, never the former (EGRESS_ALLOW_PRIVATE reopens a proxy on the LAN).
        let mut network = crate::policy::Containment::for_base_build(env)?;
        let lan = if env.egress_require {
            crate::policy::LanDemand::Required
        } else {
            crate::policy::LanDemand::WhereSmolvmCan
        };
        let (policy, notes) =
            crate::lifecycle::containment::create_args(&mut network, version, false, lan)?;
        for note in notes {
            self.transcript.line(&note);
            ui::warn(note);
        }
        let spec = CreateSpec {
            name: self.machine.clone(),
            image: env.base_image.clone(),
            ports: Vec::new(),
            cpus: env.cpus,
            mem_mib: env.mem_mib,
            env: crate::lifecycle::test_guest_env::from_env(),
            workload: guest::launcher(),
            labels: crate::smolvm::labels::for_new_machine(
                &self.ctx.state,
                version,
                &self.machine,
            )?
            .0,
            // A box's own policy applies to the machine made from the base.
            policy,
        };
        self.created = true; // from here a failure deletes it (a failed create leaves none)
        self.smolvm.create(&spec)?;
        if version.needs_nic_workaround() {
            self.smolvm.update_net(&self.machine)?;
        }
        self.checkpoint()?;
        ui::say(format!("[1/4] Starting '{}'", self.machine));
        self.smolvm
            .start_cancellable(&self.machine, Some(self.signals.flag()))?;
        self.checkpoint()?;
        crate::lifecycle::containment::check_enforced(&self.smolvm, &self.machine, &network)?;
        ui::say("[2/4] Provisioning (everything but what is per box)");
        self.setup().install_assets()?;
        self.checkpoint()?;
        self.setup().provision_steps(Some(BASE_STEPS))?;
        self.checkpoint()?;
        let tools = self.tool_versions()?;
        ui::say(format!(
            "[3/4] Checking for user state and preparing: {}",
            tools.join(", ")
        ));
        let out = self.smolvm.exec(
            &self.machine,
            &["/bin/bash", "-c", &guest_prep::prepare_script()],
            ExecOpts {
                timeout: Some(timeouts::COPY),
                cancel: Some(self.signals.flag()),
                ..ExecOpts::default()
            },
        )?;
        self.transcript.block("prepare base", &out.stdout);
        self.transcript.block("prepare base (stderr)", &out.stderr);
        match out.code {
            Some(0) => {}
            Some(3) => bail!(
                "the builder holds user state, so it cannot become a base:\n{}",
                out.stdout
                    .trim()
                    .lines()
                    .map(crate::ui::terminal_text::quoted)
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
            _ => bail!(
                "preparing the base failed ({}){}",
                guest::status(&out),
                guest::last_lines(&out.stderr, &out.stdout)
            ),
        }
        self.checkpoint()?;
        self.smolvm.stop(&self.machine)?;
        ui::say(format!(
            "[4/4] Packing '{}' (smolvm pack create --from-vm)",
            self.machine
        ));
        let staging = store.staging_out(&self.digest);
        let transcript = &mut self.transcript;
        let mut on_line = |_s: Stream, line: &str| {
            transcript.line(line);
            let l = line.trim_start_matches('\r').trim();
            if l.starts_with("Packed:") || l.starts_with("Pulling") || l.starts_with("Exporting") {
                ui::say(format!("  {l}"));
            }
        };
        self.smolvm.pack_from_vm(
            &self.machine,
            &staging,
            BASE_WORKLOAD,
            env.cpus,
            env.mem_mib,
            Some(&mut on_line),
        )?;
        let sidecar = sidecar_of(&staging);
        let size = store.file_size(&sidecar)?;
        let pack = store.place_pack(&sidecar, &self.digest)?;
        let warm = self.warm_shared_store(version, &pack, env);
        let meta = BaseMeta {
            warm,
            digest: self.digest.clone(),
            key: self.key.clone(),
            built_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            size_bytes: size,
            tools,
            smolvm_version: version.to_string(),
            build_secs: t0.elapsed().as_secs(),
        };
        store.install(&meta)?;
        Ok(meta)
    }

    /// smolvm 1.3+ on Linux extracts a pack once into its shared store at the first
    /// `create --from`; that first extraction took ~29 s of the first `box new` after a
    /// build. Pay it now with a throwaway machine, so the first box is as fast as the rest
    /// (the store has no eviction: deleting the machine keeps the extraction). Best effort:
    /// a failure only leaves the first box slower.
    fn warm_shared_store(
        &mut self,
        version: SmolvmVersion,
        pack: &std::path::Path,
        env: &box_proto::BoxEnv,
    ) -> bool {
        // A remote host is Linux.
        let linux = cfg!(target_os = "linux") || self.smolvm.host().is_some();
        if !version.shares_extracted_packs()
            || !linux
            || std::env::var_os("SMOLVM_DISABLE_SHARED_EXTRACT").is_some()
        {
            return false;
        }
        ui::say("  Warming smolvm's shared store (the extraction the first box would wait for)");
        let name = format!("{}-warm", self.machine);
        let spec = CreateFromSpec {
            name: name.clone(),
            pack: pack.to_path_buf(),
            ports: Vec::new(),
            cpus: env.cpus,
            mem_mib: env.mem_mib,
            env: Vec::new(),
            labels: crate::smolvm::labels::for_new_machine(&self.ctx.state, version, &name)
                .map(|(l, _)| l)
                .unwrap_or_default(),
            policy: Vec::new(),
        };
        let created = self.smolvm.create_from(&spec);
        let deleted = self.smolvm.delete(&name);
        match (created, deleted) {
            (Ok(()), Ok(())) => true,
            (Ok(()), Err(e)) => {
                ui::warn(format!(
                    "the store is warm, but the warming machine stayed: {e}; remove it with: smolvm machine delete --name {name} -f"
                ));
                true
            }
            (Err(e), _) => {
                self.transcript.line(&format!("warming failed: {e}"));
                ui::warn(format!(
                    "could not warm smolvm's shared store ({e}); the first box from this base extracts it"
                ));
                false
            }
        }
    }

    fn tool_versions(&mut self) -> Result<Vec<String>> {
        let out = self.setup().exec_ok(
            "tool versions",
            &[guest::HB_PATH, "versions"],
            timeouts::EXEC,
        )?;
        Ok(guest_prep::tool_versions(&out))
    }

    /// Deletes the builder (whatever happened) and the staging files.
    fn cleanup(&mut self, store: &Store) {
        if self.created
            && let Err(e) = self.smolvm.delete(&self.machine)
            && !e.is_not_found()
        {
            ui::warn(format!(
                "could not delete the base builder '{}': {e}; remove it with: smolvm machine delete --name {} -f",
                self.machine, self.machine
            ));
        }
        let staging = store.staging_out(&self.digest);
        let sidecar = sidecar_of(&staging);
        store.remove_quietly(&[staging, sidecar]);
    }
}

fn sidecar_of(out: &std::path::Path) -> std::path::PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(".smolmachine");
    std::path::PathBuf::from(s)
}
