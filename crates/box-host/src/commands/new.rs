//! `box new <name>`: create, provision and check a box (docs/design.md, "new", and its
//! rollback rules for what happens on failure or a signal).

use std::process::ExitCode;

use anyhow::{Result, anyhow};
use box_proto::BoxName;

use super::Context;
use crate::lifecycle::cleanup::{self, Rollback};
use crate::lifecycle::containment;
use crate::lifecycle::guest;
use crate::lifecycle::ports;
use crate::lifecycle::setup::Setup;
use crate::lifecycle::signals::DeferredSignals;
use crate::lifecycle::test_guest_env;
use crate::lifecycle::transcript::Transcript;
use crate::policy::carried::Carried;
use crate::policy::{Containment, LanDemand};
use crate::smolvm::{CreateSpec, Smolvm, SmolvmError};
use crate::state::{BoxRecord, LockGuard, LockKey, Registry, locks};
use crate::ui;
use crate::ui::timings::Timings;

/// The stages a failure is attributed to, as the seed names them.
const STAGE_CREATE: &str = "creating the base VM";
const STAGE_PROVISION: &str = "provisioning";
const STAGE_RUNTIME: &str = "preparing the runtime (MCP wiring, doctor)";

/// A failure that stops `box new`.
enum Stop {
    /// A signal arrived; exit with 128+signal after cleaning up.
    Signal(usize),
    Error(anyhow::Error),
}

impl<E: Into<anyhow::Error>> From<E> for Stop {
    fn from(e: E) -> Self {
        let e: anyhow::Error = e.into();
        match e.downcast_ref::<SmolvmError>() {
            Some(SmolvmError::Interrupted { signal, .. }) => Stop::Signal(*signal),
            _ => Stop::Error(e),
        }
    }
}

/// One run of `box new`: what it created so far, so a failure undoes exactly that.
struct NewRun<'a> {
    ctx: &'a Context,
    smolvm: Smolvm,
    signals: DeferredSignals,
    name: BoxName,
    machine: String,
    transcript: Transcript,
    stage: &'static str,
    /// The machine exists because this invocation created it.
    created: bool,
    row_written: bool,
    registry_lock: Option<LockGuard>,
    port: Option<u16>,
    /// `box load --keep-on-failure`: a failure keeps the VM (as BOX_KEEP_ON_FAILURE=1 does).
    keep_on_failure: bool,
    /// `--fresh`: provision from scratch even when a base exists.
    fresh: bool,
    /// The base this box starts from, when there is one.
    base: Option<crate::base::store::BaseMeta>,
    /// `box load`: a restore follows, which stops Executor (quiesce), then starts, wires
    /// and checks the restored box; starting and checking the empty one first is skipped.
    restore_follows: bool,
    /// Where the seconds went (ui/timings.rs): the transcript's and -v's last line.
    timings: Timings,
    /// Where the box may connect and which API keys it may use.
    containment: Containment,
    /// The box it comes from (`load`, `clone`) had its LAN closed: a smolvm that cannot
    /// close it refuses.
    lan_recorded: bool,
    /// The values of those keys, read before any VM exists, for `machine start` only.
    keys: Vec<(String, secrecy::SecretString)>,
}

/// The smolvm machine name of a new box: the box's name on this machine (as always); on a
/// remote host, prefixed with this state dir's id, so two laptops sharing one remote account
/// never collide (the prefix shows nowhere the user types names).
fn machine_name(ctx: &Context, name: &BoxName) -> Result<String> {
    if ctx.host.is_none() {
        return Ok(name.to_string());
    }
    let id = crate::smolvm::labels::state_id(&ctx.state)?;
    Ok(format!("hb-{}-{name}", &id[..8]))
}

pub fn run(ctx: &Context, args: &crate::cli::NewArgs) -> Result<ExitCode> {
    // --hermes-gateway is HERMES_SERVICES with gateway in it, for this box: the rendered
    // guest config carries it to `hb init --seed-services`.
    let with_gateway;
    let ctx = if args.hermes_gateway {
        let mut own = ctx.clone();
        let services = &mut own.config.env.hermes_services;
        services.push(box_proto::HermesService::Gateway);
        services.sort();
        services.dedup();
        own.config
            .env
            .check_ranges(&box_proto::box_env::Origin::Default)
            .map_err(|e| anyhow!("--hermes-gateway: {}", e.problem))?;
        with_gateway = own;
        &with_gateway
    } else {
        ctx
    };
    let name = BoxName::parse(&args.name)?;
    crate::state::reserved::refuse_reserved(&name)?;
    let containment = Containment::from_config(&ctx.config.env, &args.policy.overrides())?;
    let signals = DeferredSignals::install()?;
    let _box_lock = locks::try_acquire(
        &ctx.state,
        LockKey::Box(name.clone()),
        &format!("box new {name}"),
    )?;
    let transcript = Transcript::create(&ctx.state, name.as_str(), "new")?;
    let mut run = NewRun {
        ctx,
        smolvm: ctx.selected_smolvm(),
        signals,
        machine: machine_name(ctx, &name)?,
        name,
        transcript,
        stage: STAGE_CREATE,
        created: false,
        row_written: false,
        registry_lock: None,
        port: None,
        keep_on_failure: false,
        fresh: args.fresh,
        base: None,
        restore_follows: false,
        timings: Timings::start(),
        containment,
        lan_recorded: false,
        keys: Vec::new(),
    };
    match run.steps() {
        Ok(()) => {
            if args.policy.egress.as_deref() == Some("learn") {
                ui::say(learn_note(&run.name));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(stop) => Ok(run.fail(stop)),
    }
}

/// What a box made with `--egress learn` (an allowlist box) is for, and the way on.
fn learn_note(name: &BoxName) -> String {
    format!(
        "Learning: '{name}' reaches only the agents' names and yours (box egress {name} lists \
         them). Work in it as usual: a name outside the list fails as a DNS error, and smolvm \
         records the refusal. Then box egress {name} --learn proposes the entries to add (from \
         those denials), and box egress {name} --allow-host ENTRY --restart adds them"
    )
}

impl NewRun<'_> {
    /// Stops at a pending signal; called between steps.
    fn checkpoint(&self) -> Result<(), Stop> {
        match self.signals.pending() {
            Some(sig) => Err(Stop::Signal(sig)),
            None => Ok(()),
        }
    }

    fn steps(&mut self) -> Result<(), Stop> {
        self.build()?;
        let timings = self.timings.line();
        self.transcript.line(&timings);
        tracing::info!("{timings}");
        if let Err(e) = Registry::new(&self.ctx.state).mark_complete(&self.name) {
            ui::warn(format!("{e:#}"));
        }
        self.created = false; // success: nothing to undo
        ui::say(format!(
            "Box '{}' built in {:.1} s{}",
            self.name,
            self.timings.elapsed().as_secs_f64(),
            self.base
                .as_ref()
                .map(|b| format!(
                    " from base {} (built {} ago)",
                    b.digest,
                    crate::base::store::human_age(b.age())
                ))
                .unwrap_or_default(),
        ));
        ui::say(format!("Ready. Enter with: box enter {}", self.name));
        if let Some(p) = self.port {
            ui::say(format!(
                "Executor web: http://127.0.0.1:{p} (box open {})",
                self.name
            ));
        }
        for service in &self.ctx.config.env.hermes_services {
            ui::say(format!(
                "Hermes {} kept running (box logs {} {service}; inside: hb service list)",
                service.word(),
                self.name
            ));
        }
        ui::say(format!(
            "Authenticate inside, then box save {} to capture the state.",
            self.name
        ));
        Ok(())
    }

    /// Create, start, provision, wire and check: everything `new` does but the last words.
    fn build(&mut self) -> Result<(), Stop> {
        let env = &self.ctx.config.env;
        self.checkpoint()?;
        let version = self.smolvm.version()?;
        if !version.is_tested() {
            ui::warn(format!(
                "smolvm {version} is outside the checked range {}; continuing",
                crate::smolvm::version::checked_range()
            ));
        }
        self.transcript
            .line(&format!("box new {}: smolvm {version}", self.name));

        crate::lifecycle::guest_assets::preflight()?;
        // A bad GUEST_CA_CERTS file or an unreachable (loopback) proxy stops us before any
        // VM exists.
        crate::lifecycle::guest_network::GuestNetwork::from_host(env, self.smolvm.host(), |k| {
            std::env::var(k).ok()
        })?;

        self.base = self.pick_base();
        // The policy on this smolvm (what it cannot do is refused or said), and the API
        // keys' values, before any VM exists.
        let lan = if self.lan_recorded {
            LanDemand::Recorded
        } else if env.egress_require {
            LanDemand::Required
        } else {
            LanDemand::WhereSmolvmCan
        };
        let (policy, notes) =
            containment::create_args(&mut self.containment, version, self.base.is_some(), lan)?;
        for note in notes {
            self.transcript.line(&note);
            ui::warn(note);
        }
        self.keys = containment::values(&self.containment.credentials)?;
        for line in self.containment.describe() {
            ui::say(format!("  {line}"));
        }
        // The memory check reads this machine's memory: a remote host's is doctor's.
        if self.base.is_none()
            && self.ctx.host.is_none()
            && !crate::doctor::host_checks::is_simulator(&self.smolvm)
            && let Some(c) = crate::doctor::host_checks::seed_memory(
                version,
                crate::doctor::host_checks::available_mib(),
            )
        {
            // What the first create of an image costs on this host (smolvm 1.22+).
            ui::warn(c.detail);
        }

        // The check-create-register window, under the registry lock.
        let registry = Registry::new(&self.ctx.state);
        self.registry_lock = Some(locks::try_acquire(
            &self.ctx.state,
            LockKey::Registry,
            &format!("box new {}", self.name),
        )?);
        if let Some(taken) = registry.get(&self.name)? {
            let refusal = format!("box '{}' is already registered", self.name);
            return Err(crate::lifecycle::boxes::name_taken(&taken, refusal).into());
        }
        if let Some(m) = self.smolvm.find(&self.machine)? {
            if crate::smolvm::labels::made_here(m.labels.as_ref(), &self.ctx.state) {
                return Err(anyhow!(
                    "{}; then run this again",
                    crate::lifecycle::boxes::unrecorded(&m.name)
                )
                .into());
            }
            return Err(anyhow!(
                "smolvm machine '{}' already exists ({}); box never touches a machine it did not create: pick another name",
                m.name,
                m.state
            )
            .into());
        }
        let mut create_env = Vec::new();
        let mut ports_spec = Vec::new();
        if env.install_executor && env.expose_executor_web {
            let held: Vec<u16> = registry
                .list()?
                .records
                .iter()
                .filter_map(|r| r.web_port)
                .collect();
            let port = match self.smolvm.host() {
                None => ports::pick(env.web_ports(), &held)?,
                Some(host) => ports::pick_on(
                    env.web_ports(),
                    &held,
                    &ports::listening_on(&self.smolvm)?,
                    host,
                )?,
            };
            ports_spec.push((port, port));
            create_env.push(("HB_WEB_PORT".to_string(), port.to_string()));
            self.port = Some(port);
        }
        create_env.extend(test_guest_env::from_env());
        self.checkpoint()?;
        self.timings.mark("checks");
        ui::say(format!(
            "Creating box '{}' from {}",
            self.name, env.base_image
        ));
        if let Some(p) = self.port {
            ui::say(format!(
                "Assigned host port {p} -> Executor web (http://127.0.0.1:{p})"
            ));
        }
        let (labels, machine_label) =
            crate::smolvm::labels::for_new_machine(&self.ctx.state, version, self.name.as_str())?;
        let spec = CreateSpec {
            name: self.machine.clone(),
            image: env.base_image.clone(),
            ports: ports_spec,
            cpus: env.cpus,
            mem_mib: env.mem_mib,
            env: create_env,
            workload: guest::launcher(),
            labels,
            policy,
        };
        // Signals stay deferred through create: it is never cut short.
        if let Some(base) = self.base.clone() {
            self.create_from_base(&spec, &base)?;
        } else {
            match self.smolvm.create(&spec) {
                Ok(notes) => {
                    for note in notes {
                        self.transcript.line(&format!("smolvm: {note}"));
                        ui::warn(format!("smolvm {note}"));
                    }
                }
                Err(e) => {
                    self.transcript.line(&format!("create failed: {e}"));
                    self.registry_lock = None;
                    cleanup::warn_create_failed(&self.machine);
                    return Err(e.into());
                }
            }
        }
        self.created = true;
        self.transcript.line("machine created");
        if version.needs_nic_workaround() {
            self.smolvm.update_net(&self.machine)?;
        }
        registry.insert(&BoxRecord {
            name: self.name.clone(),
            machine: self.machine.clone(),
            web_port: self.port,
            created_at: chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string(),
            box_version: crate::version::VERSION.to_string(),
            base_image: env.base_image.clone(),
            incomplete: true,
            kept_after_failure: None,
            machine_label,
            host: self.ctx.host.as_ref().map(ToString::to_string),
            containment: Some(self.containment.clone()),
            backup_dir: None,
        })?;
        self.row_written = true;
        self.registry_lock = None;
        self.checkpoint()?;
        self.timings.mark("create");

        ui::say(format!("Starting '{}'", self.name));
        self.smolvm
            .start_with_keys(&self.machine, Some(self.signals.flag()), &self.keys)?;
        self.checkpoint()?;
        containment::check_bound(&self.smolvm, &self.machine, &self.containment.credentials)?;
        containment::check_enforced(&self.smolvm, &self.machine, &self.containment)?;
        self.timings.mark("start");

        self.stage = STAGE_PROVISION;
        if self.base.is_some() {
            self.repair_base_ownership()?;
            self.setup().install_assets()?;
            self.checkpoint()?;
            if self.restore_follows {
                // The workload starts Executor as soon as the agent's home exists (a box
                // from a base gets it in the per-box steps); a box about to be restored
                // into stays paused instead of starting it only to stop it for the restore.
                self.setup().hb_step(&["init", "--paused"])?;
            }
            self.setup()
                .provision_steps(Some(crate::base::guest_prep::PER_BOX_STEPS))?;
        } else {
            self.setup().install_assets()?;
            self.checkpoint()?;
            self.setup().provision()?;
        }
        self.checkpoint()?;
        self.timings.mark("provision");
        if self.restore_follows {
            return Ok(());
        }

        self.stage = STAGE_RUNTIME;
        self.setup().runtime(true)?;
        self.checkpoint()?;
        self.timings.mark("runtime");
        let port = self.port;
        self.setup().health(port)?;
        self.checkpoint()?;
        self.timings.mark("health");
        Ok(())
    }

    /// The base for this configuration, unless `--fresh`; says what it found.
    fn pick_base(&mut self) -> Option<crate::base::store::BaseMeta> {
        use crate::base::{key::BaseKey, store};
        if self.fresh {
            ui::say("--fresh: provisioning from scratch");
            return None;
        }
        let env = &self.ctx.config.env;
        let found = BaseKey::current(env, &test_guest_env::from_env())
            .and_then(|key| store::Store::for_smolvm(&self.ctx.state, &self.smolvm)?.find(&key));
        match found {
            Ok(Some(base)) => {
                let age = store::human_age(base.age());
                if base.is_stale(env.base_max_age_days) {
                    ui::warn(format!(
                        "base {} is {age} old, past BASE_MAX_AGE_DAYS={}: its `latest` tools may be behind; refresh it with: box base build --refresh",
                        base.digest, env.base_max_age_days
                    ));
                }
                ui::say(format!("Using base {} (built {age} ago)", base.digest));
                self.transcript
                    .line(&format!("base {} built {age} ago", base.digest));
                Some(base)
            }
            Ok(None) => {
                ui::say(
                    "No base for this configuration: provisioning from the network \
                     (box base build makes one; then box new and box load take seconds)",
                );
                None
            }
            Err(e) => {
                ui::warn(format!(
                    "cannot look for a base ({e:#}); provisioning from scratch"
                ));
                None
            }
        }
    }

    /// `machine create --from` the base, then what smolvm does not do for us: the box's own
    /// resources (the pack's are defaults that `--cpus 4`/`--mem 8192` cannot override) and
    /// the check for 1.0.4's eviction of the extracted pack.
    fn create_from_base(
        &mut self,
        spec: &CreateSpec,
        base: &crate::base::store::BaseMeta,
    ) -> Result<(), Stop> {
        let pack = crate::base::store::Store::for_smolvm(&self.ctx.state, &self.smolvm)?
            .pack_path(&base.digest);
        let from = crate::smolvm::CreateFromSpec {
            name: spec.name.clone(),
            pack,
            ports: spec.ports.clone(),
            cpus: spec.cpus,
            mem_mib: spec.mem_mib,
            env: spec.env.clone(),
            labels: spec.labels.clone(),
            policy: spec.policy.clone(),
        };
        // A failed extraction should leave no machine; if smolvm left one, the rollback
        // deletes it and verifies it is gone.
        self.created = true;
        if let Err(e) = self.smolvm.create_from(&from) {
            self.transcript.line(&format!("create --from failed: {e}"));
            return Err(anyhow!(
                "creating '{}' from base {} failed: {e}\nThe base may be damaged: remove it with `box base rm {}` and rebuild it with `box base build`, or run `box new --fresh`",
                self.name,
                base.digest,
                base.digest
            )
            .into());
        }
        let data = self.smolvm.data_dir(&self.machine)?;
        if !self.smolvm.layers_present(&data)? {
            return Err(anyhow!(
                "smolvm removed the base's extracted layers right after creating '{}' (the 1.0.4 pack cache eviction: {} has no .smolvm-extracted); set SMOLVM_PACK_CACHE_MAX_BYTES above the base's size ({} bytes) or run `box new --fresh`",
                self.machine,
                data.join("pack").display(),
                base.size_bytes
            )
            .into());
        }
        self.smolvm
            .update_resources(&self.machine, spec.cpus, spec.mem_mib)?;
        Ok(())
    }

    /// smolvm 1.0.4 gives a pack's root files back owned by the host user: make them
    /// root's again before anything runs (a no-op when the owners are intact).
    fn repair_base_ownership(&mut self) -> Result<(), Stop> {
        let script = crate::base::guest_prep::repair_ownership_script();
        let out = self.setup().exec_ok(
            "ownership after create --from",
            &["/bin/sh", "-c", &script],
            crate::smolvm::timeouts::COPY,
        )?;
        if let Some(line) = out.lines().find(|l| l.starts_with("repaired")) {
            ui::say(line);
        }
        Ok(())
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

    /// Reports the failure, undoes what this run created, and picks the exit status.
    fn fail(&mut self, stop: Stop) -> ExitCode {
        let code = match &stop {
            Stop::Signal(sig) => {
                ui::error(format!(
                    "box new {} interrupted by {} while {}",
                    self.name,
                    DeferredSignals::name(*sig),
                    self.stage
                ));
                self.transcript
                    .line(&format!("interrupted by signal {sig}"));
                ExitCode::from(DeferredSignals::exit_status(*sig))
            }
            Stop::Error(e) => {
                ui::error(format!("box creation failed while {}: {e:#}", self.stage));
                self.transcript
                    .line(&format!("failed while {}: {e:#}", self.stage));
                ExitCode::FAILURE
            }
        };
        if self.created {
            if self.keep_on_failure || std::env::var("BOX_KEEP_ON_FAILURE").is_ok_and(|v| v == "1")
            {
                if self.row_written {
                    let verb = if self.restore_follows { "load" } else { "new" };
                    cleanup::mark_kept(
                        &self.ctx.state,
                        &self.name,
                        &format!("box {verb} failed while {}", self.stage),
                    );
                }
                ui::warn(format!(
                    "BOX_KEEP_ON_FAILURE=1: keeping the VM '{}' for inspection; remove it with: box rm {} --force",
                    self.machine, self.name
                ));
            } else {
                let lock = self.registry_lock.take();
                let outcome = cleanup::rollback_created(
                    &self.ctx.state,
                    &self.smolvm,
                    &self.name,
                    &self.machine,
                    lock,
                    self.row_written,
                );
                self.transcript.line(&format!("rollback: {outcome:?}"));
                if outcome == Rollback::Clean {
                    tracing::info!("rollback of '{}' complete", self.name);
                }
            }
        }
        self.registry_lock = None;
        ui::warn(format!("transcript: {}", self.transcript.path().display()));
        code
    }
}

/// A box that [`create_and_provision`] created, started, provisioned, wired and checked for
/// a caller that goes on working on it (`box load`). The caller owns it from here: on a
/// later failure it must delete it with `lifecycle::cleanup::rollback_created` (the
/// registry row is written).
pub struct Provisioned {
    pub machine: String,
    pub port: Option<u16>,
    /// Made from a base: its tools came with the base, only the per-box steps ran.
    pub from_base: bool,
    pub smolvm: Smolvm,
    pub transcript: Transcript,
    /// Where its seconds went so far.
    pub timings: Timings,
    /// Where the box may connect and which API keys it may use (as its registry row).
    pub containment: Containment,
}

/// `box new`'s create-and-provision flow without its box lock (the caller holds it),
/// without starting and checking the runtime (the caller restores into the box, then does)
/// and without its closing words. On failure or a signal it has already undone what it created
/// (`lifecycle::cleanup`; `keep_on_failure` keeps the VM) and reported it; the `Err` is the
/// exit status.
pub fn create_and_provision(
    ctx: &Context,
    name: &BoxName,
    verb: &str,
    keep_on_failure: bool,
    fresh: bool,
    carried: Carried,
) -> Result<Provisioned, ExitCode> {
    let setup = || -> Result<(DeferredSignals, Transcript, String)> {
        Ok((
            DeferredSignals::install()?,
            Transcript::create(&ctx.state, name.as_str(), verb)?,
            machine_name(ctx, name)?,
        ))
    };
    let (signals, transcript, machine) = match setup() {
        Ok(v) => v,
        Err(e) => {
            ui::error(format!("{e:#}"));
            return Err(ExitCode::FAILURE);
        }
    };
    let mut run = NewRun {
        ctx,
        smolvm: ctx.selected_smolvm(),
        signals,
        machine,
        name: name.clone(),
        transcript,
        stage: STAGE_CREATE,
        created: false,
        row_written: false,
        registry_lock: None,
        port: None,
        keep_on_failure,
        fresh,
        base: None,
        restore_follows: true,
        timings: Timings::start(),
        containment: carried.policy,
        lan_recorded: carried.lan_required,
        keys: Vec::new(),
    };
    match run.build() {
        Ok(()) => Ok(Provisioned {
            from_base: run.base.is_some(),
            machine: run.machine,
            port: run.port,
            smolvm: run.smolvm,
            transcript: run.transcript,
            timings: run.timings,
            containment: run.containment,
        }),
        Err(stop) => Err(run.fail(stop)),
    }
}
