//! The wiring of a run: what runs ([`Fleet`]: the config in force, each service's loops),
//! how branch and stable-name loops start ([`Loops`]) and where their events go ([`Route`]),
//! and the sink tasks per namespace and target ([`Sinks`]).

use crate::clock::Clock;
use crate::config::{Config, PublishTarget, ServiceConfig, SinkKind};
use crate::fold::ServiceId;
use crate::probe::stable_name::BranchEndpoint;
use crate::probe::{BranchProbe, InputsDigest};
use crate::record::PublishFailureClass;
use crate::scheduler::{BranchEvent, Schedule, StableNameTarget, branch_loop, stable_name_loop};
use crate::sink::cloudwatch::{CloudWatchClient, CloudWatchSink};
use crate::sink::emf::{EmfBuffer, EmfSink};
use crate::sink::otlp::{Origin, OtlpSettings, OtlpSink, SinkHeader};
use crate::sink::{Sink, SinkError, SinkId, SinkQueue, SinkReport, sinks_of};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Options of one `run`.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Stop after this long (ECS scheduled task); `None` runs until a signal.
    pub duration: Option<Duration>,
    /// How long in-flight attempts and the final publish may take after a stop request.
    pub grace: Duration,
    /// Where the `emf` sink writes: `None` for stdout (the product), a buffer for a caller that
    /// reads the lines itself (tests).
    pub emf_out: Option<EmfBuffer>,
    /// The heartbeat file the loop rewrites every [`crate::heartbeat::EVERY`] for `readyprobe
    /// health`; `None` writes none.
    pub heartbeat: Option<PathBuf>,
}

/// A branch event's origin: the feed it came on ([`Loops`]) and that feed's service.
pub(super) struct Tag {
    pub(super) feed: u64,
    pub(super) service: ServiceId,
    /// The service's name: the evidence names a removed service's late events by it.
    pub(super) name: Arc<str>,
}

/// The channels and tasks between the shell and the branch loops and sinks.
pub(super) struct Wiring {
    /// Branch events tagged with their origin.
    pub(super) events: mpsc::Receiver<(Tag, BranchEvent)>,
    pub(super) reports: mpsc::UnboundedReceiver<SinkReport>,
    pub(super) sinks: Sinks,
    pub(super) fleet: Fleet,
    /// With `[evidence.s3]`: the task that uploads the evidence's closed segments.
    pub(super) uploader: Option<crate::sink::evidence_s3::Uploader>,
    /// With `[serve]`: the endpoint, stopped at the end of the shutdown.
    pub(super) serving: Option<crate::serve::Serving>,
}

/// What runs: the config in force, each running service's branch loops, and how to start more.
pub(super) struct Fleet {
    pub(super) cfg: Config,
    pub(super) live: BTreeMap<ServiceId, Live>,
    /// The id the next added service gets.
    pub(super) next_id: ServiceId,
    pub(super) loops: Loops,
}

/// A running service: its settings, the digest of the inputs its probes were prepared from,
/// and a loop per branch.
pub(super) struct Live {
    pub(super) cfg: ServiceConfig,
    /// A reload restarts the service's loops when its files or secrets now read otherwise.
    pub(super) inputs: InputsDigest,
    /// Per branch name: the feed its events come on and its task.
    pub(super) loops: BTreeMap<String, (u64, JoinHandle<u64>)>,
    /// The stable-name loop's feed and task, while `[stable_name_probe]` is enabled.
    pub(super) stable: Option<(u64, JoinHandle<u64>)>,
}

/// Starts branch loops. Each start (a service's branches, or those a reload restarts) gets a
/// feed of its own, whose events a task tags with the feed's id and service; an event is folded
/// only when its feed is still its branch's, so an attempt of a loop a reload replaced or
/// stopped never reaches the new state (it is recorded as such, [`Route::Stopped`]). Nothing
/// is kept per feed: the tag carries what routing needs.
pub(super) struct Loops {
    /// `None` once shutdown began: the event channel closes when the last loop ends.
    pub(super) tx: Option<mpsc::Sender<(Tag, BranchEvent)>>,
    pub(super) resolver: hickory_resolver::TokioResolver,
    pub(super) clock: Clock,
    pub(super) grace: Duration,
    pub(super) stop: CancellationToken,
    pub(super) next_feed: u64,
    /// The run's Secrets Manager secrets, read again by their own task until `stop`.
    pub(super) secrets: crate::secrets::SecretCache,
}

impl Loops {
    /// Start a loop per probe of service `id` (first attempts jittered, as at start-up), each
    /// paced by the `watch` whose sender comes back beside it (for [`Shell::pace`]).
    pub(super) fn spawn(
        &mut self,
        id: ServiceId,
        svc: &ServiceConfig,
        probes: Vec<BranchProbe>,
    ) -> Spawned {
        let Some(out) = self.tx.clone() else {
            return (Vec::new(), Vec::new());
        };
        if probes.is_empty() {
            return (Vec::new(), Vec::new());
        }
        let schedule = Schedule {
            interval: svc.probe.interval,
            suspect_interval: svc.probe.suspect_interval,
            jitter: svc.probe.jitter,
            grace: self.grace,
        };
        let (feed, tx) = self.open_feed(out, id, &svc.service.name, 64);
        probes
            .into_iter()
            .map(|p| {
                let name = p.branch.name.clone();
                let (pace, paced) = watch::channel(false);
                let h = tokio::spawn(branch_loop(
                    p,
                    self.resolver.clone(),
                    self.clock,
                    schedule,
                    (tx.clone(), paced),
                    self.stop.clone(),
                ));
                ((name.clone(), (feed, h)), (name, pace))
            })
            .unzip()
    }
}

impl Loops {
    /// Start service `id`'s stable-name loop when `cfg` enables `[stable_name_probe]` (with
    /// `end_to_end`, its attempts use `probes`, the service's branch probes); `None` otherwise
    /// or once shutdown began. Its rounds are routed to the service while the loop is the
    /// service's, and dropped once a reload stopped or replaced it.
    pub(super) fn spawn_stable_name(
        &mut self,
        id: ServiceId,
        svc: &ServiceConfig,
        cfg: &Config,
        probes: &[BranchProbe],
    ) -> Option<(u64, JoinHandle<u64>)> {
        let out = self.tx.clone()?;
        let settings = &cfg.stable_name_probe;
        if !settings.enabled {
            return None;
        }
        let target = StableNameTarget {
            service: svc.service.name.clone(),
            stable_name: svc.service.stable_name.clone(),
            branches: svc
                .branches
                .iter()
                .map(|b| BranchEndpoint {
                    name: b.name.clone(),
                    role: b.role,
                    endpoint: b.endpoint.clone(),
                })
                .collect(),
            family: cfg.dns.address_family,
            end_to_end: if settings.end_to_end {
                probes
                    .iter()
                    .map(BranchProbe::through_stable_name)
                    .collect()
            } else {
                Vec::new()
            },
        };
        let schedule = Schedule {
            interval: settings.interval,
            suspect_interval: None,
            jitter: settings.interval / 10,
            grace: self.grace,
        };
        let (feed, tx) = self.open_feed(out, id, &svc.service.name, 8);
        let (resolver, stop) = (self.resolver.clone(), self.stop.clone());
        let task = stable_name_loop(target, resolver, self.clock, schedule, tx, stop);
        Some((feed, tokio::spawn(task)))
    }
}

impl Loops {
    /// A new feed of service `id`: its number, and the sender of a channel (`capacity` events)
    /// whose events a task tags with the feed and service and forwards to `out`.
    fn open_feed(
        &mut self,
        out: mpsc::Sender<(Tag, BranchEvent)>,
        id: ServiceId,
        service: &str,
        capacity: usize,
    ) -> (u64, mpsc::Sender<BranchEvent>) {
        let feed = self.next_feed;
        self.next_feed += 1;
        let name: Arc<str> = service.into();
        let (tx, mut rx) = mpsc::channel::<BranchEvent>(capacity);
        tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                let tag = Tag {
                    feed,
                    service: id,
                    name: name.clone(),
                };
                if out.send((tag, ev)).await.is_err() {
                    break;
                }
            }
        });
        (feed, tx)
    }
}

/// What [`Loops::spawn`] started: each branch's feed and task, and each branch's pace sender.
pub(super) type Spawned = (
    Vec<(String, (u64, JoinHandle<u64>))>,
    Vec<(String, watch::Sender<bool>)>,
);

/// Where a branch event goes.
pub(super) enum Route {
    /// Its loop still runs: into the fold for this service.
    Live(ServiceId),
    /// A reload stopped its loop (its service removed, its branch restarted or removed): into
    /// the evidence for the named service, never into a window.
    Stopped(Arc<str>),
}

impl Fleet {
    /// Where an event goes: live when its feed is still its branch's.
    pub(super) fn route(&self, tag: Tag, ev: &BranchEvent) -> Route {
        let branch = match ev {
            BranchEvent::Attempt(a) => &a.branch,
            BranchEvent::Abandoned { branch, .. } => branch,
            BranchEvent::StableName(..) => {
                let live = self.live.get(&tag.service).and_then(|l| l.stable.as_ref());
                return match live {
                    Some((feed, _)) if *feed == tag.feed => Route::Live(tag.service),
                    _ => Route::Stopped(tag.name),
                };
            }
        };
        let current = self
            .live
            .get(&tag.service)
            .and_then(|l| l.loops.get(branch));
        match current {
            Some((feed, _)) if *feed == tag.feed => Route::Live(tag.service),
            _ => Route::Stopped(tag.name),
        }
    }

    /// Stop service `id`'s loops: an attempt in flight is cut off and reported abandoned.
    pub(super) fn stop_service(&mut self, id: ServiceId) -> Option<Live> {
        let live = self.live.remove(&id)?;
        for (_, h) in live.loops.values().chain(&live.stable) {
            h.abort();
        }
        Some(live)
    }

    pub(super) fn handles(&self) -> impl Iterator<Item = &JoinHandle<u64>> {
        self.live
            .values()
            .flat_map(|l| l.loops.values().chain(&l.stable).map(|(_, h)| h))
    }
}

/// A service's branch probes and the digest of the inputs they were prepared from.
pub(super) type Probes = (Vec<BranchProbe>, InputsDigest);

/// The sinks a service's datums go to ([`sinks_of`]), as the fold routes them.
pub(super) fn fold_sinks(cfg: &Config, svc: &ServiceConfig) -> crate::fold::Sinks {
    let routes = sinks_of(&cfg.publish, &svc.publish_targets);
    routes.into_iter().map(|r| r.id).collect()
}

/// The sink queues of every namespace and target, and what starting one more needs: the sink
/// tasks report on one channel and stop together. A sink per (namespace, sink, target): a target
/// that hangs, throttles or refuses delays no other. A target's CloudWatch client is built at
/// its first call and shared by its namespaces.
pub(super) struct Sinks {
    /// The CloudWatch client of each target (by [`SinkId::target`]) and what it was built for.
    clients: BTreeMap<Option<Arc<str>>, (PublishTarget, CloudWatchClient)>,
    pub(super) emf_out: Option<EmfBuffer>,
    pub(super) report_tx: mpsc::UnboundedSender<SinkReport>,
    pub(super) tasks: TaskTracker,
    /// Cancelled at the end of the grace period: sends still running are cut.
    pub(super) stop: CancellationToken,
    /// The sinks running, per namespace, with the target each was started for.
    running: BTreeMap<(String, SinkId), Option<PublishTarget>>,
    /// The `otlp` sink's settings, prepared once ([`Sinks::prepare_otlp`]; `publish.otlp` is
    /// restart-only), or why every one of its sends fails.
    otlp: Result<Arc<OtlpSettings>, (PublishFailureClass, String)>,
}

/// The `otlp` sink's settings: its header secrets read (a Secrets Manager one from the run's
/// cache, following refreshes) and, for `https`, its TLS client configuration; or why not,
/// naming the key, never a value.
fn otlp_settings(
    cfg: &Config,
    secrets: &crate::secrets::SecretCache,
) -> Result<Arc<OtlpSettings>, (PublishFailureClass, String)> {
    use crate::config::{HeaderValueSource, MinVersion, SecretRef, SslMode};
    let rejected = |why: String| (PublishFailureClass::PublishRejected, why);
    let Some(o) = &cfg.publish.otlp else {
        return Err(rejected("[publish.otlp] is not set".into()));
    };
    let endpoint: http::Uri = o
        .endpoint
        .parse()
        .map_err(|e| rejected(format!("publish.otlp.endpoint: {e}")))?;
    let mut headers = Vec::with_capacity(o.headers.len());
    for (name, v) in &o.headers {
        let (value, secret) = match v {
            HeaderValueSource::Plain(p) => {
                (Ok(crate::secrets::SecretCell::fixed(p.clone())), false)
            }
            HeaderValueSource::Secret(SecretRef::SecretsManager(r)) => (secrets.cell(r), true),
            HeaderValueSource::Secret(r) => (
                crate::probe::local_secret(r).map(crate::secrets::SecretCell::fixed),
                true,
            ),
        };
        let value = value.map_err(|why| {
            let reference = match v {
                HeaderValueSource::Secret(r) => r.to_string(),
                HeaderValueSource::Plain(_) => String::new(),
            };
            (
                PublishFailureClass::PublishCredentials,
                format!("publish.otlp.headers.{name} ({reference}) is unavailable: {why}"),
            )
        })?;
        headers.push(SinkHeader {
            name: name.clone(),
            value,
            secret,
        });
    }
    let tls = match &o.ssl_ca {
        Some(ca) if o.is_https() => crate::probe::tls::client_config(
            SslMode::VerifyIdentity,
            Some(ca),
            MinVersion::Tls12,
            None,
        )
        .map_err(|e| rejected(format!("publish.otlp.ssl_ca: {}", e.0)))?,
        _ => None,
    };
    Ok(Arc::new(OtlpSettings {
        endpoint,
        redactor: OtlpSettings::redactor_of(&headers),
        headers,
        timeout: o.timeout,
        max_tries: o.max_tries,
        tls,
        interval: cfg.publish.interval,
    }))
}

/// Why every batch of the `otlp` sink would fail, as [`otlp_settings`] finds it: its class and
/// the reason, naming the key and the secret's reference (never a value); `None` when the sink
/// is not set or its inputs are available. For `check`, which reads what `run` prepares.
pub fn otlp_unavailable(
    cfg: &Config,
    secrets: &crate::secrets::SecretCache,
) -> Option<(PublishFailureClass, String)> {
    cfg.publish.otlp.as_ref()?;
    otlp_settings(cfg, secrets).err()
}

impl Sinks {
    /// No sink yet: [`Sinks::add`] starts each service's.
    pub(super) fn new(opts: &RunOptions) -> (Sinks, mpsc::UnboundedReceiver<SinkReport>) {
        let (report_tx, reports) = mpsc::unbounded_channel();
        let tasks = TaskTracker::new();
        // Closed from the start: `wait` then ends once every sink task has (tasks started
        // later by a reload included).
        tasks.close();
        let sinks = Sinks {
            clients: BTreeMap::new(),
            emf_out: opts.emf_out.clone(),
            report_tx,
            tasks,
            stop: CancellationToken::new(),
            running: BTreeMap::new(),
            otlp: Err((
                PublishFailureClass::PublishRejected,
                "the otlp sink was not prepared".into(),
            )),
        };
        (sinks, reports)
    }

    /// Prepare the `otlp` sink's settings once, before its first [`Sinks::add`]: header secrets
    /// (Secrets Manager ones read into `secrets` already) and the CA bundle.
    pub(super) fn prepare_otlp(&mut self, cfg: &Config, secrets: &crate::secrets::SecretCache) {
        if cfg.publish.otlp.is_some() {
            self.otlp = otlp_settings(cfg, secrets);
        }
    }

    /// The client of target `t` known as `name`: the one built before while `t` is unchanged.
    fn client(
        &mut self,
        cfg: &Config,
        name: &Option<Arc<str>>,
        t: &PublishTarget,
    ) -> CloudWatchClient {
        match self.clients.get(name) {
            Some((was, c)) if was == t => c.clone(),
            _ => {
                let (cw, interval) = (&cfg.publish.cloudwatch, cfg.publish.interval);
                let c = CloudWatchClient::of_target(t, name.clone(), &cfg.prober_id, cw, interval);
                self.clients.insert(name.clone(), (t.clone(), c.clone()));
                c
            }
        }
    }

    /// Start, in `queues`, a task behind a bounded queue per sink of `svc` that its namespace
    /// lacks; a sink whose target's settings changed is replaced (the old one sends what it
    /// holds and ends).
    pub(super) fn add(
        &mut self,
        queues: &mut Vec<(String, SinkQueue)>,
        cfg: &Config,
        svc: &ServiceConfig,
    ) {
        let ns = &svc.namespace;
        for route in sinks_of(&cfg.publish, &svc.publish_targets) {
            let (id, target) = (route.id, route.target.cloned());
            let key = (ns.clone(), id.clone());
            if let Some(was) = self.running.get(&key) {
                if *was == target {
                    continue;
                }
                queues.retain(|(n, q)| !(n == ns && *q.id() == id));
            }
            let sink: Box<dyn Sink> = match route.kind {
                SinkKind::Otlp => {
                    let settings = self
                        .otlp
                        .clone()
                        .map_err(|(class, message)| SinkError { message, class });
                    let origin = Origin {
                        prober_id: cfg.prober_id.clone(),
                        namespace: ns.clone(),
                    };
                    Box::new(OtlpSink::new(settings, origin))
                }
                SinkKind::Emf => Box::new(match &self.emf_out {
                    Some(buf) => EmfSink::with_writer(ns, Box::new(buf.clone())),
                    None => EmfSink::new(ns),
                }),
                SinkKind::CloudWatch => {
                    // `sinks_of` gives every CloudWatch route its target.
                    let t = target
                        .clone()
                        .unwrap_or_else(|| cfg.publish.default_target());
                    let client = self.client(cfg, &id.target, &t);
                    Box::new(CloudWatchSink::with_client(&client, ns))
                }
            };
            let q = SinkQueue::spawn(sink, self.report_tx.clone(), &self.tasks, self.stop.clone());
            self.running.insert(key, target);
            queues.push((ns.clone(), q));
        }
    }

    /// Stop every sink `cfg`'s services no longer use: their queues in `queues` are dropped,
    /// so each task sends what it holds, reports it, and ends. Returns the namespaces left with
    /// no sink.
    pub(super) fn retain(
        &mut self,
        queues: &mut Vec<(String, SinkQueue)>,
        cfg: &Config,
    ) -> Vec<String> {
        let used: BTreeSet<(String, SinkId)> = cfg
            .services
            .iter()
            .flat_map(|s| {
                sinks_of(&cfg.publish, &s.publish_targets)
                    .into_iter()
                    .map(|r| (s.namespace.clone(), r.id))
            })
            .collect();
        let before: BTreeSet<String> = self.running.keys().map(|(ns, _)| ns.clone()).collect();
        self.running.retain(|k, _| used.contains(k));
        queues.retain(|(ns, q)| used.contains(&(ns.clone(), q.id().clone())));
        let after: BTreeSet<String> = self.running.keys().map(|(ns, _)| ns.clone()).collect();
        let named: BTreeSet<&Option<Arc<str>>> =
            self.running.keys().map(|(_, id)| &id.target).collect();
        let unused: Vec<Option<Arc<str>>> = self
            .clients
            .keys()
            .filter(|n| !named.contains(n))
            .cloned()
            .collect();
        for n in unused {
            self.clients.remove(&n);
        }
        before.difference(&after).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::PublishOutcome;
    use crate::sink::{Queued, service_unavailable_datum};
    use tokio::time::Instant;

    fn config() -> Config {
        crate::config::parse(
            std::path::Path::new("/etc/readyprobe/one.toml"),
            config_text(),
        )
        .unwrap_or_else(|e| panic!("{:?}", e.issues))
    }

    fn config_text() -> &'static str {
        r#"
prober_id = "p1"
[probe]
kind = "tcp"
[service]
name = "alpha"
stable_name = "alpha.example.internal"
[[branch]]
name = "primary"
role = "PRIMARY"
endpoint = "alpha-primary.example.internal"
port = 5432
"#
    }

    /// The sinks of a namespace no service uses any more send the batch they hold, report it,
    /// and end; the others run on, and the namespace can come back later.
    #[tokio::test]
    async fn the_sinks_of_an_unused_namespace_flush_and_stop() {
        let emf = EmfBuffer::new();
        let opts = RunOptions {
            duration: None,
            grace: Duration::from_secs(1),
            emf_out: Some(emf.clone()),
            heartbeat: None,
        };
        let cfg = config();
        let (mut sinks, mut reports) = Sinks::new(&opts);
        let (mut kept, mut gone) = (cfg.clone(), cfg.clone());
        kept.services[0].namespace = "Kept".into();
        gone.services[0].namespace = "Gone".into();
        let mut queues = Vec::new();
        sinks.add(&mut queues, &kept, &kept.services[0]);
        sinks.add(&mut queues, &gone, &gone.services[0]);
        assert_eq!(sinks.tasks.len(), 2);
        let batch = Queued {
            id: 7,
            datums: vec![service_unavailable_datum("alpha", 1_000)],
            deadline: Instant::now() + Duration::from_secs(30),
        };
        queues[1].1.offer(batch).expect("queued");
        assert_eq!(sinks.retain(&mut queues, &kept), ["Gone"]);
        assert_eq!(queues.len(), 1);
        assert_eq!(queues[0].0, "Kept");
        let wait = Duration::from_secs(10);
        let rep = tokio::time::timeout(wait, reports.recv())
            .await
            .expect("a report")
            .expect("open");
        assert_eq!((rep.batch, rep.outcome), (7, PublishOutcome::Sent));
        assert!(emf.lines().iter().any(|l| l.contains("\"Gone\"")));
        let ended = async {
            while sinks.tasks.len() > 1 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(wait, ended)
            .await
            .expect("the unused namespace's task ends");
        // Nothing to stop when every namespace is used; a namespace used again gets new sinks.
        assert!(sinks.retain(&mut queues, &kept).is_empty());
        sinks.add(&mut queues, &gone, &gone.services[0]);
        assert_eq!(queues.len(), 2);
    }

    /// A sink per (namespace, sink, target): a target whose settings a reload changed under
    /// the same name gets a new sink in place of the old; a target no service names any more
    /// loses its sink while its namespace keeps the others.
    #[tokio::test]
    async fn a_sink_per_target_follows_the_config() {
        let with = |publish: &str| {
            let text = config_text().replace(
                "stable_name = \"alpha.example.internal\"",
                &format!("stable_name = \"alpha.example.internal\"\npublish = {publish}"),
            );
            let text = format!("{text}\n[publish]\nsinks = [\"emf\", \"cloudwatch\"]\n");
            crate::config::parse(std::path::Path::new("/etc/readyprobe/one.toml"), &text)
                .unwrap_or_else(|e| panic!("{:?}", e.issues))
        };
        let opts = RunOptions {
            duration: None,
            grace: Duration::from_secs(1),
            emf_out: Some(EmfBuffer::new()),
            heartbeat: None,
        };
        let one = with("{ name = \"a\", region = \"eu-west-1\" }");
        let (mut sinks, _reports) = Sinks::new(&opts);
        let mut queues = Vec::new();
        let ids = |q: &[(String, SinkQueue)]| -> Vec<String> {
            q.iter().map(|(ns, q)| format!("{ns} {}", q.id())).collect()
        };
        sinks.add(&mut queues, &one, &one.services[0]);
        assert_eq!(ids(&queues), ["Readyprobe emf", "Readyprobe cloudwatch[a]"]);
        sinks.add(&mut queues, &one, &one.services[0]);
        assert_eq!(queues.len(), 2, "nothing new for the same targets");
        let moved = with("{ name = \"a\", region = \"eu-west-2\" }");
        sinks.add(&mut queues, &moved, &moved.services[0]);
        assert_eq!(ids(&queues), ["Readyprobe emf", "Readyprobe cloudwatch[a]"]);
        assert_eq!(
            sinks.clients[&Some("a".into())].0.region.as_deref(),
            Some("eu-west-2")
        );
        let two = with("[{ name = \"b\" }]");
        sinks.add(&mut queues, &two, &two.services[0]);
        assert_eq!(queues.len(), 3);
        assert!(
            sinks.retain(&mut queues, &two).is_empty(),
            "the namespace is still used"
        );
        assert_eq!(ids(&queues), ["Readyprobe emf", "Readyprobe cloudwatch[b]"]);
        assert!(!sinks.clients.contains_key(&Some("a".into())));
    }
}
