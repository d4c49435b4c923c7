//! The DaemonSet controller at fleet size, simulated (issue 25, item 6): where the bed
//! cannot go (10,000 nodes x 20 DaemonSets = 200,000 pods), the controller's own code
//! runs over synthetic shared stores, driven by an event stream, and today's path runs
//! beside it on an identical copy of the stores in the same process.
//!
//! Two worlds are built from the same objects: each has the shared stores, fed through
//! the watch's own `Fanout` (so the new world's owner index is kept by the same code as
//! in the controller, and paid for here). Then the same event stream is applied to
//! both, one event at a time:
//!   - node flaps at a realistic shape: Ready turns Unknown, the node lifecycle
//!     controller taints it (NoSchedule, NoExecute), later Ready again, taints removed:
//!     four node writes per flap;
//!   - the pod writes of a rollout of one DaemonSet: the old pod marked terminating,
//!     deleted, the new one created pending for the node, bound, started not Ready,
//!     Ready.
//!
//! For each event, each world decides which DaemonSets to re-plan, as its controller
//! would (old: every non-unmanaged DaemonSet on a Ready transition; new:
//! `triggers::daemonsets_for_node`; pods: `triggers::pod_unchanged`, then the owner),
//! and re-plans each: policy, its pods (`controller::owned_pods`, `FullScan` or
//! `Index`), its current revision, the nodes, the expectations, `plan_rolling_update`
//! and the stale-condition check: the CPU work of a reconcile before its first API call.
//! No queue coalescing is credited: every trigger is one re-plan, in both worlds.
//! The new world plans as the controller does: the DaemonSet's pods and the nodes are
//! observed into a memo of what its plans read, kept by object version while it rolls
//! out (`controller::observe`, `rolling_plan::PlanMemo`); today's world reads every pod
//! and node on every plan. The memo's heap is reported on its own row (it is not in
//! the stores' bytes per pod, and exists only while a DaemonSet rolls).
//!
//! The new world's node mapping takes the fast path a DaemonSet whose only pod on the
//! node serves the current revision (`triggers::serves_current`), and its pods are
//! cached without the conditions no controller reads; today's world keeps them all, as
//! today's conversion did.
//!
//! Figures: CPU per event and per flap (this thread's CPU time, from
//! `CLOCK_THREAD_CPUTIME_ID`), re-plans per flap, plan CPU p99, and heap bytes per
//! pod of each world's stores (store + index for the new one; a counting allocator on
//! this thread). Results go to `target/bench/results.json` (`daemonset.fleet.*`).
//!
//! Environment: `ROLLGATE_BENCH_FLEET_NODES` (10000; `BENCH_QUICK=1`: 1000),
//! `..._DAEMONSETS` (20), `..._FLAPS` (40; quick: 20), `..._ROLLOUT_PODS` (40; quick 20),
//! `..._SEED` (1).
#[path = "../tests/support/heap.rs"]
mod heap;
#[path = "../tests/support/measure.rs"]
mod measure;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use futures::channel::mpsc;
use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::{
    ControllerRevision, DaemonSet, DaemonSetSpec, DaemonSetStatus, DaemonSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    Container, Node, NodeCondition, NodeSpec, NodeStatus, Pod, PodCondition, PodSpec, PodStatus,
    PodTemplateSpec, Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ObjectMeta, OwnerReference, Time,
};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::{self, Lookup, ObjectRef, Store};
use kube::runtime::watcher;
use serde_json::json;

use rollgate::daemonset::controller::{current_revision, observe, owned_pods, PodLookup};
use rollgate::daemonset::expectations::Expectations;
use rollgate::daemonset::ota_plan::plan_leftover_condition_removals;
use rollgate::daemonset::policy::{policy_for, Policy, PolicyDecision};
use rollgate::daemonset::pull_ahead::pull_ahead_of;
use rollgate::daemonset::rolling_plan::{
    plan_rolling_update, plan_rolling_update_memo, Blocker, PlanMemo, RollingInput, RollingLimits,
};
use rollgate::daemonset::triggers::{daemonsets_for_node, pod_unchanged, NodeTriggerView};
use rollgate::names::{
    CONTROLLER_REVISION_HASH_LABEL, MAX_UNAVAILABLE_ANNOTATION, UPDATE_STRATEGY_ANNOTATION,
};
use rollgate::object::pod::CachedCondition;
use rollgate::object::{CachedNode, CachedPod, NodeFacts};
use rollgate::watch::fanout::Fanout;
use rollgate::watch::{PodsByOwner, Stores};

const NAMESPACE: &str = "fleet";

struct Params {
    nodes: usize,
    daemonsets: usize,
    flaps: usize,
    rollout_pods: usize,
    seed: u64,
    quick: bool,
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(format!("ROLLGATE_BENCH_FLEET_{name}"))
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

impl Params {
    fn from_env() -> Self {
        let quick = std::env::var("BENCH_QUICK").as_deref() == Ok("1");
        Params {
            nodes: env_or("NODES", if quick { 1000 } else { 10_000 }),
            daemonsets: env_or("DAEMONSETS", 20),
            flaps: env_or("FLAPS", if quick { 20 } else { 40 }),
            rollout_pods: env_or("ROLLOUT_PODS", if quick { 20 } else { 40 }),
            seed: env_or("SEED", 1) as u64,
            quick,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Synthetic objects, shaped like the bed's (and a real edge fleet's)
// ---------------------------------------------------------------------------------------

fn at(seconds: i64) -> Time {
    Time(Timestamp::from_second(1_800_000_000 + seconds).unwrap())
}

fn node_name(i: usize) -> String {
    format!("edge-{i:05}")
}

fn node(i: usize, ready: bool, since: i64, tainted: bool) -> Node {
    let name = node_name(i);
    let taints = tainted.then(|| {
        ["NoSchedule", "NoExecute"]
            .map(|effect| Taint {
                key: "node.kubernetes.io/unreachable".into(),
                effect: effect.into(),
                time_added: Some(at(since)),
                ..Default::default()
            })
            .to_vec()
    });
    Node {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            uid: Some(format!("uid-{name}")),
            resource_version: Some(since.to_string()),
            labels: Some(BTreeMap::from([
                ("kubernetes.io/hostname".into(), name),
                (
                    "topology.kubernetes.io/zone".into(),
                    format!("zone-{}", i % 10),
                ),
                ("node-role.kubernetes.io/edge".into(), String::new()),
            ])),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints,
            ..Default::default()
        }),
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "Unknown" }.into(),
                last_transition_time: Some(at(since)),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

fn ds_name(k: usize) -> String {
    format!("agent-{k:02}")
}

fn daemonset(k: usize) -> DaemonSet {
    let name = ds_name(k);
    let labels = BTreeMap::from([("app".to_string(), name.clone())]);
    DaemonSet {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(NAMESPACE.into()),
            uid: Some(format!("uid-{name}")),
            generation: Some(2),
            annotations: Some(BTreeMap::from([
                (
                    UPDATE_STRATEGY_ANNOTATION.to_string(),
                    "AdvancedRollingUpdate".to_string(),
                ),
                (MAX_UNAVAILABLE_ANNOTATION.to_string(), "10%".to_string()),
            ])),
            ..Default::default()
        },
        spec: DaemonSetSpec {
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..Default::default()
            },
            update_strategy: Some(DaemonSetUpdateStrategy {
                type_: Some("OnDelete".into()),
                ..Default::default()
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "agent".into(),
                        image: Some(format!("registry.example/{name}:v2")),
                        ..Default::default()
                    }],
                    // Edge agents run everywhere, cut-off nodes included.
                    tolerations: Some(vec![Toleration {
                        operator: Some("Exists".into()),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
            },
            ..Default::default()
        },
        status: Some(DaemonSetStatus {
            observed_generation: Some(2),
            ..Default::default()
        }),
    }
}

fn owner(ds: &DaemonSet) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: "DaemonSet".into(),
        name: ds.metadata.name.clone().unwrap(),
        uid: ds.metadata.uid.clone().unwrap(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn revision(ds: &DaemonSet, hash: &str, number: i64) -> ControllerRevision {
    let name = ds.metadata.name.clone().unwrap();
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(format!("{name}-{hash}")),
            namespace: Some(NAMESPACE.into()),
            labels: Some(BTreeMap::from([(
                CONTROLLER_REVISION_HASH_LABEL.to_string(),
                hash.to_string(),
            )])),
            owner_references: Some(vec![owner(ds)]),
            ..Default::default()
        },
        revision: Some(number),
        data: Default::default(),
    }
}

/// A pod's state in a rollout.
#[derive(Clone, Copy, PartialEq)]
enum PodState {
    Pending,
    Bound,
    Started,
    Ready,
    Terminating,
}

fn pod(ds: &DaemonSet, node: usize, hash: &str, state: PodState, since: i64) -> Pod {
    let ds_name = ds.metadata.name.clone().unwrap();
    let name = format!("{ds_name}-{hash}-{}", node_name(node));
    let ready = |status: &str, since| PodCondition {
        type_: "Ready".into(),
        status: status.into(),
        last_transition_time: Some(at(since)),
        ..Default::default()
    };
    let conditions = match state {
        PodState::Pending | PodState::Bound => vec![],
        PodState::Started => vec![ready("False", since)],
        PodState::Ready | PodState::Terminating => vec![
            ready("True", since),
            PodCondition {
                type_: "ContainersReady".into(),
                status: "True".into(),
                last_transition_time: Some(at(since)),
                ..Default::default()
            },
            PodCondition {
                type_: "PodScheduled".into(),
                status: "True".into(),
                last_transition_time: Some(at(since - 5)),
                ..Default::default()
            },
        ],
    };
    let mut spec: PodSpec = serde_json::from_value(json!({
        "containers": [{"name": "agent", "image": format!("registry.example/{ds_name}:{hash}")}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node_name(node)]}]}]}}},
    }))
    .unwrap();
    if state != PodState::Pending {
        spec.node_name = Some(node_name(node));
    }
    Pod {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(NAMESPACE.into()),
            uid: Some(format!("uid-{name}")),
            resource_version: Some(since.to_string()),
            labels: Some(BTreeMap::from([
                ("app".to_string(), ds_name),
                (CONTROLLER_REVISION_HASH_LABEL.to_string(), hash.to_string()),
            ])),
            owner_references: Some(vec![owner(ds)]),
            creation_timestamp: Some(at(since - 10)),
            deletion_timestamp: (state == PodState::Terminating).then(|| at(since)),
            ..Default::default()
        },
        spec: Some(spec),
        status: Some(PodStatus {
            phase: Some(
                if state == PodState::Pending {
                    "Pending"
                } else {
                    "Running"
                }
                .into(),
            ),
            pod_ip: (state != PodState::Pending)
                .then(|| format!("10.{}.{}.{}", node / 65536, (node / 256) % 256, node % 256)),
            conditions: Some(conditions),
            ..Default::default()
        }),
    }
}

// ---------------------------------------------------------------------------------------
// A world: the shared stores, fed through the watch's own Fanout
// ---------------------------------------------------------------------------------------

type Feed<K> = mpsc::UnboundedSender<Result<watcher::Event<K>, watcher::Error>>;
type Reflected<K> =
    std::pin::Pin<Box<dyn Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send>>;

/// One kind's store and the watch path that writes it.
struct Kind<K>
where
    K: Lookup + Clone + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    store: Store<K>,
    feed: Feed<K>,
    reflected: Reflected<K>,
    _fanout: Fanout<K>,
}

impl<K> Kind<K>
where
    K: Lookup + Clone + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    fn new(index: impl rollgate::watch::fanout::StoreIndex<K>) -> Self {
        let (store, writer) = reflector::store::<K>();
        let (feed, events) = mpsc::unbounded();
        let fanout = Fanout::new(16);
        let reflected = Box::pin(fanout.reflect_indexed(writer, events, index));
        Kind {
            store,
            feed,
            reflected,
            _fanout: fanout,
        }
    }

    /// Applies one watch event through the Fanout (store, then index).
    fn apply(&mut self, event: watcher::Event<K>) {
        self.feed.unbounded_send(Ok(event)).unwrap();
        futures::executor::block_on(self.reflected.next());
    }
}

struct World {
    lookup: PodLookup,
    stores: Stores,
    pods: Kind<CachedPod>,
    nodes: Kind<CachedNode>,
    daemonsets: Kind<DaemonSet>,
    revisions: Kind<ControllerRevision>,
    expectations: Expectations,
    /// The new world's looks kept between plans, by DaemonSet name, as the controller
    /// keeps them (only while the DaemonSet rolls out).
    memos: std::collections::HashMap<String, PlanMemo<CachedPod, CachedNode>>,
    /// Plans made, and the CPU each took (ns).
    plan_cpu_ns: Vec<u64>,
}

impl World {
    fn new(lookup: PodLookup) -> Self {
        let index = PodsByOwner::default();
        let pods = match lookup {
            PodLookup::Index => Kind::new(index.clone()),
            // Today's controller keeps no index: its store is fed without one.
            PodLookup::FullScan => Kind::<CachedPod>::new(()),
        };
        let nodes = Kind::<CachedNode>::new(());
        let daemonsets = Kind::<DaemonSet>::new(());
        let revisions = Kind::<ControllerRevision>::new(());
        let jobs = reflector::store().0;
        let stores = Stores {
            daemonsets: daemonsets.store.clone(),
            pods: pods.store.clone(),
            pods_by_owner: index,
            revisions: revisions.store.clone(),
            nodes: nodes.store.clone(),
            jobs,
        };
        World {
            lookup,
            stores,
            pods,
            nodes,
            daemonsets,
            revisions,
            expectations: Expectations::default(),
            memos: Default::default(),
            plan_cpu_ns: Vec::new(),
        }
    }

    /// The DaemonSets a node write re-plans, as this world's controller maps it.
    fn node_triggers(&self, before: Option<&CachedNode>, after: &CachedNode) -> Vec<String> {
        let daemonsets = self.stores.daemonsets.state();
        match self.lookup {
            // Before issue 25: every Ready transition re-planned every managed DaemonSet.
            PodLookup::FullScan => {
                if before.is_some_and(|b| b.is_ready() == after.is_ready()) {
                    return Vec::new();
                }
                daemonsets
                    .iter()
                    .filter(|ds| !matches!(policy_for(ds), PolicyDecision::Unmanaged))
                    .map(|ds| ds.metadata.name.clone().unwrap())
                    .collect()
            }
            PodLookup::Index => {
                let vacated = |ds: &str, node: &str| self.expectations.has_vacated(ds, node);
                let expected = |ds: &str, pod: &str| self.expectations.deletion_expected(ds, pod);
                let current = |ds: &DaemonSet| current_revision(&self.stores, ds);
                let view = NodeTriggerView {
                    pods: &self.stores.pods_by_owner,
                    current: &current,
                    vacated_by_us: &vacated,
                    deletion_expected: &expected,
                    now: now(),
                };
                daemonsets_for_node(before, Some(after), &daemonsets, &view)
                    .into_iter()
                    .map(|r| r.name)
                    .collect()
            }
        }
    }

    /// What a reconcile of an AdvancedRollingUpdate DaemonSet computes before its first
    /// call; returns the deletions planned.
    fn replan(&mut self, name: &str) -> usize {
        let start = thread_cpu_ns();
        let key = ObjectRef::<DaemonSet>::new(name).within(NAMESPACE);
        let Some(ds) = self.stores.daemonsets.get(&key) else {
            return 0;
        };
        let PolicyDecision::Managed(Policy::AdvancedRollingUpdate {
            max_unavailable,
            partition,
            node_selector,
            waves,
            failure,
            ..
        }) = policy_for(&ds)
        else {
            return 0;
        };
        let current = current_revision(&self.stores, &ds);
        let uid = ds.metadata.uid.clone().unwrap_or_default();
        let list_upcoming = matches!(pull_ahead_of(&ds), Ok(true));
        // Today's controller read every pod and node on every plan. The new one, as
        // the controller: the DaemonSet's pods and the nodes observed into its memo
        // (kept while it rolls out), planned from there, and the stale-condition check
        // given the pods the looks flag.
        let (pods, nodes, memo) = match self.lookup {
            PodLookup::FullScan => (
                owned_pods(&self.stores, &ds, self.lookup),
                self.stores.nodes.state(),
                None,
            ),
            PodLookup::Index => {
                let mut memo = self.memos.remove(name).unwrap_or_default();
                observe(&self.stores, &ds, current.as_ref(), &mut memo);
                (Vec::new(), Vec::new(), Some(memo))
            }
        };
        let now_instant = std::time::Instant::now();
        let pending = match &memo {
            Some(memo) => self.expectations.pending(&uid, memo.pods(), now_instant),
            None => self.expectations.pending(&uid, &pods, now_instant),
        };
        let input = RollingInput {
            daemonset: &ds,
            current: current.as_ref(),
            pods: &pods,
            nodes: &nodes,
            max_unavailable,
            now: now(),
            expected_deletions: &pending.deletions,
            vacated_by_us: &pending.vacated,
            limits: RollingLimits::default(),
            partition,
            node_selector: node_selector.as_ref(),
            waves: waves.as_ref(),
            proving: failure.proving(),
            list_upcoming,
        };
        let (plan, stale) = match &memo {
            Some(memo) => (
                plan_rolling_update_memo(&input, memo),
                plan_leftover_condition_removals(&ds, &memo.with_need_upgrade()),
            ),
            None => (
                plan_rolling_update(&input),
                plan_leftover_condition_removals(&ds, &pods),
            ),
        };
        std::hint::black_box(&stale);
        if let Some(memo) = memo {
            if !matches!(
                plan.progress.blocked,
                Some(Blocker::Complete | Blocker::HeldBack)
            ) {
                self.memos.insert(name.to_string(), memo);
            }
        }
        self.plan_cpu_ns.push(thread_cpu_ns() - start);
        plan.deletions.len()
    }
}

/// A pod as the world's pod store keeps it. Today's code kept every condition; the new
/// one keeps only the types some controller reads (`CachedPod::from`), so today's world
/// puts the others back, as its conversion did.
fn cached(pod: Pod, lookup: PodLookup) -> CachedPod {
    let all = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let mut cached = CachedPod::from(pod);
    if lookup == PodLookup::FullScan {
        cached.conditions = all
            .into_iter()
            .map(|c| CachedCondition {
                type_: c.type_.into(),
                status: c.status.into(),
                reason: c.reason.map(Into::into),
                message: c.message.map(Into::into),
                last_transition_time: c.last_transition_time,
            })
            .collect();
    }
    cached
}

/// The controller's clock in the simulation: after every event of the stream.
fn now() -> Timestamp {
    Timestamp::from_second(1_800_100_000).unwrap()
}

// ---------------------------------------------------------------------------------------
// The event stream
// ---------------------------------------------------------------------------------------

#[derive(Clone)]
enum Step {
    Node(Node),
    PodApply(Pod),
    PodDelete(Pod),
}

/// A small deterministic generator (no dependency for it).
struct Lcg(u64);
impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n.max(1)
    }
}

/// Flaps of random nodes interleaved with the rollout of DaemonSet 0 (old hash `h1`,
/// new `h2`) over its first `rollout_pods` nodes, as the API server sends the writes.
fn event_stream(p: &Params, rollout: &DaemonSet) -> (Vec<Step>, usize) {
    let mut rng = Lcg(p.seed);
    let mut flaps: Vec<Vec<Step>> = Vec::new();
    let mut flapped = BTreeSet::new();
    let mut t = 1_000;
    while flaps.len() < p.flaps {
        let n = rng.below(p.nodes);
        // A node in the rollout's way is left alone, so both streams stay well-formed.
        if n < p.rollout_pods || !flapped.insert(n) {
            continue;
        }
        t += 10;
        flaps.push(vec![
            Step::Node(node(n, false, t, false)),
            Step::Node(node(n, false, t, true)),
            Step::Node(node(n, true, t + 40, true)),
            Step::Node(node(n, true, t + 40, false)),
        ]);
    }
    let mut rollout_steps: Vec<Vec<Step>> = Vec::new();
    for n in 0..p.rollout_pods {
        let t = 2_000 + 10 * n as i64;
        rollout_steps.push(vec![
            Step::PodApply(pod(rollout, n, "h1", PodState::Terminating, t)),
            Step::PodDelete(pod(rollout, n, "h1", PodState::Terminating, t)),
            Step::PodApply(pod(rollout, n, "h2", PodState::Pending, t + 1)),
            Step::PodApply(pod(rollout, n, "h2", PodState::Bound, t + 1)),
            Step::PodApply(pod(rollout, n, "h2", PodState::Started, t + 2)),
            Step::PodApply(pod(rollout, n, "h2", PodState::Ready, t + 5)),
        ]);
    }
    // Interleave: each flap's writes and each pod's writes stay in order.
    let mut stream = Vec::new();
    let (mut f, mut r) = (flaps.into_iter(), rollout_steps.into_iter());
    loop {
        let pick_flap = rng.below(2) == 0;
        let next = if pick_flap {
            f.next().or_else(|| r.next())
        } else {
            r.next().or_else(|| f.next())
        };
        match next {
            Some(steps) => stream.extend(steps),
            None => break,
        }
    }
    (stream, p.flaps)
}

// ---------------------------------------------------------------------------------------
// Measuring
// ---------------------------------------------------------------------------------------

/// This thread's CPU time so far, in nanoseconds: `CLOCK_THREAD_CPUTIME_ID`, which
/// brings a running thread's count up to date when read. (`/proc/thread-self/schedstat`,
/// used before, moves only at scheduler ticks and switches while the thread runs: on a
/// quiet machine most plans, shorter than a tick, read 0 there.)
fn thread_cpu_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the call to fill in.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } != 0 {
        return 0;
    }
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

fn peak_rss_mib() -> f64 {
    measure::peak_rss_kib(std::process::id()).map_or(0.0, |kib| kib as f64 / 1024.0)
}

#[derive(Default)]
struct Figures {
    bytes_per_pod: f64,
    cpu_per_event_ms: f64,
    cpu_per_flap_ms: f64,
    cpu_rollout_per_pod_ms: f64,
    replans_per_flap: f64,
    plan_p99_ms: f64,
    plan_p50_ms: f64,
    deletions: usize,
    /// The new world's plan memo of the rolling DaemonSet (its pods and every node),
    /// per pod of that DaemonSet: kept only while it rolls out.
    memo_bytes_per_rolling_pod: f64,
}

fn run_world(p: &Params, lookup: PodLookup, stream: &[Step]) -> Figures {
    let mut world = World::new(lookup);
    let daemonsets: Vec<DaemonSet> = (0..p.daemonsets).map(daemonset).collect();
    for ds in &daemonsets {
        world.daemonsets.apply(watcher::Event::Apply(ds.clone()));
        world
            .revisions
            .apply(watcher::Event::Apply(revision(ds, "h1", 1)));
        world
            .revisions
            .apply(watcher::Event::Apply(revision(ds, "h2", 2)));
    }
    for n in 0..p.nodes {
        world
            .nodes
            .apply(watcher::Event::Apply(CachedNode::from(node(
                n, true, 0, false,
            ))));
    }
    // Every DaemonSet runs on every node; DaemonSet 0 is rolling out (h1 -> h2), the
    // others are done (h2).
    let ((), bytes) = heap::kept_by(|| {
        for (k, ds) in daemonsets.iter().enumerate() {
            let hash = if k == 0 { "h1" } else { "h2" };
            for n in 0..p.nodes {
                let pod = cached(pod(ds, n, hash, PodState::Ready, 100), lookup);
                world.pods.apply(watcher::Event::Apply(pod));
            }
        }
    });
    let pods = p.nodes * p.daemonsets;
    let mut flap_cpu = 0u64;
    let mut flap_replans = 0usize;
    let mut rollout_cpu = 0u64;
    let mut deletions = 0usize;
    let started = thread_cpu_ns();
    for step in stream {
        let t0 = thread_cpu_ns();
        let due: Vec<String> = match step {
            Step::Node(n) => {
                let after = CachedNode::from(n.clone());
                let key = ObjectRef::<CachedNode>::new(NodeFacts::name(&after));
                let before = world.nodes.store.get(&key);
                world.nodes.apply(watcher::Event::Apply(after));
                let after = world.nodes.store.get(&key).unwrap();
                world.node_triggers(before.as_deref(), &after)
            }
            Step::PodApply(pod) | Step::PodDelete(pod) => {
                let cached = cached(pod.clone(), lookup);
                let key = ObjectRef::<CachedPod>::new(pod.metadata.name.as_deref().unwrap())
                    .within(NAMESPACE);
                let before = world.pods.store.get(&key);
                let deleted = matches!(step, Step::PodDelete(_));
                if deleted {
                    world.pods.apply(watcher::Event::Delete(cached));
                } else {
                    world.pods.apply(watcher::Event::Apply(cached));
                }
                let after = world.pods.store.get(&key);
                // As `touched_unless(pod_changes, pod_unchanged)` then the owner.
                let changed = match (&before, &after) {
                    (Some(b), Some(a)) => !pod_unchanged(&**b, &**a),
                    _ => true,
                };
                if changed {
                    vec![daemonsets[0].metadata.name.clone().unwrap()]
                } else {
                    vec![]
                }
            }
        };
        let is_flap = matches!(step, Step::Node(_));
        if is_flap {
            flap_replans += due.len();
        }
        for name in due {
            deletions += world.replan(&name);
        }
        let spent = thread_cpu_ns() - t0;
        if is_flap {
            flap_cpu += spent;
        } else {
            rollout_cpu += spent;
        }
    }
    let total = thread_cpu_ns() - started;
    let memo_bytes_per_rolling_pod = match lookup {
        PodLookup::FullScan => 0.0,
        PodLookup::Index => {
            let current = current_revision(&world.stores, &daemonsets[0]);
            let (memo, bytes) = heap::kept_by(|| {
                let mut memo = PlanMemo::default();
                observe(&world.stores, &daemonsets[0], current.as_ref(), &mut memo);
                memo
            });
            drop(memo);
            bytes as f64 / p.nodes.max(1) as f64
        }
    };
    let mut plans = std::mem::take(&mut world.plan_cpu_ns);
    plans.sort_unstable();
    // No plan: no figure (NaN, `null` in results.json).
    let plan_ms = |p| measure::percentile(&plans, p).map_or(f64::NAN, |ns| ns as f64 / 1e6);
    Figures {
        bytes_per_pod: bytes as f64 / pods as f64,
        cpu_per_event_ms: total as f64 / stream.len().max(1) as f64 / 1e6,
        cpu_per_flap_ms: flap_cpu as f64 / p.flaps.max(1) as f64 / 1e6,
        cpu_rollout_per_pod_ms: rollout_cpu as f64 / p.rollout_pods.max(1) as f64 / 1e6,
        replans_per_flap: flap_replans as f64 / p.flaps.max(1) as f64,
        plan_p99_ms: plan_ms(99.0),
        plan_p50_ms: plan_ms(50.0),
        deletions,
        memo_bytes_per_rolling_pod,
    }
}

fn main() {
    let p = Params::from_env();
    let (stream, flaps) = event_stream(&p, &daemonset(0));
    eprintln!(
        "[fleet] {} nodes x {} DaemonSets, {} events ({flaps} flaps, {} rollout pods)",
        p.nodes,
        p.daemonsets,
        stream.len(),
        p.rollout_pods
    );
    let wall = Instant::now();
    // `ROLLGATE_BENCH_FLEET_ONLY_NEW=1`: today's world is skipped (its figures read 0),
    // for profiling the new path alone; results are not merged then.
    let only_new = std::env::var("ROLLGATE_BENCH_FLEET_ONLY_NEW").as_deref() == Ok("1");
    let old = if only_new {
        Figures::default()
    } else {
        run_world(&p, PodLookup::FullScan, &stream)
    };
    eprintln!(
        "[fleet] today's path done in {:.1} s",
        wall.elapsed().as_secs_f64()
    );
    let wall = Instant::now();
    let new = run_world(&p, PodLookup::Index, &stream);
    eprintln!(
        "[fleet] indexed path done in {:.1} s",
        wall.elapsed().as_secs_f64()
    );
    let peak = peak_rss_mib();

    let row = |label: &str, old: f64, new: f64, unit: &str| {
        let ratio = if new > 0.0 { old / new } else { f64::NAN };
        format!("| {label} | {old:.3}{unit} | {new:.3}{unit} | {ratio:.1}x |\n")
    };
    let mut out = format!(
        "\n## DaemonSets at fleet size, simulated ({} nodes x {} DaemonSets = {} pods{})\n\n\
         | figure | today (full scan, all on Ready flips) | indexed, mapped | today / new |\n|---|---|---|---|\n",
        p.nodes,
        p.daemonsets,
        p.nodes * p.daemonsets,
        if p.quick { ", quick" } else { "" }
    );
    out += &row(
        "CPU per node flap (4 node writes)",
        old.cpu_per_flap_ms,
        new.cpu_per_flap_ms,
        " ms",
    );
    out += &row(
        "re-plans per flap",
        old.replans_per_flap,
        new.replans_per_flap,
        "",
    );
    out += &row(
        "CPU per event",
        old.cpu_per_event_ms,
        new.cpu_per_event_ms,
        " ms",
    );
    out += &row(
        "CPU per rolled pod (6 pod writes)",
        old.cpu_rollout_per_pod_ms,
        new.cpu_rollout_per_pod_ms,
        " ms",
    );
    out += &row("plan CPU p50", old.plan_p50_ms, new.plan_p50_ms, " ms");
    out += &row("plan CPU p99", old.plan_p99_ms, new.plan_p99_ms, " ms");
    out += &row(
        "heap bytes per pod (store, + index)",
        old.bytes_per_pod,
        new.bytes_per_pod,
        "",
    );
    out += &format!(
        "| plan memo of the rolling DaemonSet, bytes per pod of it (only while it rolls) | - | {:.0} | |\n",
        new.memo_bytes_per_rolling_pod
    );
    out += &format!(
        "\ndeletions planned: today {}, new {}; peak RSS of the bench (both worlds) {peak:.0} MiB; target: a flap <= 5 ms\n",
        old.deletions, new.deletions
    );
    print!("{out}");

    let k = |name: &str| format!("daemonset.fleet.{name}");
    let entries = [
        (k("nodes"), json!(p.nodes)),
        (k("daemonsets"), json!(p.daemonsets)),
        (k("pods"), json!(p.nodes * p.daemonsets)),
        (k("events"), json!(stream.len())),
        (k("flaps"), json!(p.flaps)),
        (k("quick"), json!(p.quick)),
        (k("cpu_per_flap_ms"), json!(new.cpu_per_flap_ms)),
        (k("cpu_per_flap_ms_today"), json!(old.cpu_per_flap_ms)),
        (k("replans_per_flap"), json!(new.replans_per_flap)),
        (k("replans_per_flap_today"), json!(old.replans_per_flap)),
        (k("cpu_per_event_ms"), json!(new.cpu_per_event_ms)),
        (k("cpu_per_event_ms_today"), json!(old.cpu_per_event_ms)),
        (
            k("cpu_per_rolled_pod_ms"),
            json!(new.cpu_rollout_per_pod_ms),
        ),
        (
            k("cpu_per_rolled_pod_ms_today"),
            json!(old.cpu_rollout_per_pod_ms),
        ),
        (k("plan_p99_ms"), json!(new.plan_p99_ms)),
        (k("plan_p99_ms_today"), json!(old.plan_p99_ms)),
        (k("bytes_per_pod"), json!(new.bytes_per_pod.round())),
        (k("bytes_per_pod_today"), json!(old.bytes_per_pod.round())),
        (
            k("memo_bytes_per_rolling_pod"),
            json!(new.memo_bytes_per_rolling_pod.round()),
        ),
        (k("bench_peak_rss_mb"), json!(peak.round())),
    ];
    if only_new {
        return;
    }
    match merge(&entries) {
        Ok(path) => println!("results merged into {}", path.display()),
        Err(e) => {
            eprintln!("[fleet] ERROR: {e}");
            std::process::exit(1);
        }
    }
}

/// Merges `entries` into `results.json`, keeping other benches' keys (as the other
/// benches do through `tests/support`, which this bench does not need otherwise).
fn merge(entries: &[(String, serde_json::Value)]) -> Result<std::path::PathBuf, String> {
    let dir = std::env::var_os("ROLLGATE_BENCH_OUT")
        .filter(|d| !d.is_empty())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench")
        });
    let path = dir.join("results.json");
    let mut all: serde_json::Map<String, serde_json::Value> = match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .map_err(|e| format!("{} is not a JSON object: {e}", path.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => serde_json::Map::new(),
        Err(e) => return Err(format!("reading {}: {e}", path.display())),
    };
    for (key, value) in entries {
        all.insert(key.clone(), value.clone());
    }
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let text = serde_json::to_string_pretty(&all).map_err(|e| e.to_string())?;
    std::fs::write(&path, text + "\n").map_err(|e| e.to_string())?;
    Ok(path)
}
