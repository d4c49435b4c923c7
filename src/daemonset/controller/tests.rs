//! The controller's writes against the fake API server (`crate::apply::fake_api`):
//! what it sends, under which field manager, and what a pod gone meanwhile becomes.
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use kube::runtime::controller::Action;
use kube::ResourceExt;
use serde_json::{json, Value};

use super::ota::{mark_need_upgrade, remove_leftover_conditions};
use super::rolling::{rolling_update, Controls};
use super::*;
use crate::apply::fake_api::{fake_client, status};
use crate::daemonset::decide::{RESYNC, TARGET_RECHECK};
use crate::daemonset::policy::MaxUnavailable;
use crate::daemonset::rolling_plan::{plan_rolling_update_memo, RollingInput};
use crate::names::POD_NEED_UPGRADE_CONDITION;
use crate::object::{CachedNode, CachedPod};
use crate::testkit::{revision, store_of, DaemonSetBuilder, PodBuilder};
use crate::watch::{PodsByOwner, Stores};

fn context(client: Client, pods: &[Pod], revisions: &[ControllerRevision]) -> Context {
    let pod_store = store_of(pods.iter().cloned().map(CachedPod::from));
    Context {
        client: client.clone(),
        writer: Writer::new(client.clone()),
        stores: Stores {
            pods_by_owner: PodsByOwner::of(&pod_store.state()),
            pods: pod_store,
            daemonsets: store_of([]),
            revisions: store_of(revisions.iter().cloned()),
            nodes: store_of([]),
            jobs: store_of([]),
        },
        events: Events::new(client, DAEMONSET_CONTROLLER_NAME),
        metrics: DaemonSetMetrics::register(&Metrics::default()),
        expectations: Mutex::default(),
        said: EventDedup::default(),
        limits: RollingLimits::default(),
        other_updaters: Arc::new(OtherUpdaters::new(Duration::from_secs(300))),
        verified: Mutex::default(),
        waits: Mutex::default(),
        stall_after: Duration::from_secs(120),
        pull_ahead: PullAheadLimits::default(),
        pull_tries: Mutex::default(),
        pull_unseen: Mutex::default(),
        plan_memos: Mutex::default(),
        halted: Mutex::default(),
    }
}

/// `observe` holds what the stores hold (the DaemonSet's pods by the owner index,
/// every node), node versions replaced or deleted in between included, and the plan
/// from it is the plan from a fresh read of the stores.
#[tokio::test]
async fn observe_holds_what_the_stores_hold_and_plans_as_a_fresh_read() {
    use kube::runtime::{reflector, watcher};
    let ds = DaemonSetBuilder::new("agent")
        .strategy("AdvancedRollingUpdate")
        .on_delete()
        .build();
    let other = DaemonSetBuilder::new("other").build();
    let old = |name: &str, node: &str| {
        PodBuilder::new(name, &ds)
            .hash("old")
            .on_node(node)
            .ready_since(crate::testkit::at(1))
            .build()
    };
    let pods = [
        old("a", "n1"),
        old("b", "n2"),
        PodBuilder::new("c", &other)
            .hash("old")
            .on_node("n1")
            .build(),
    ];
    let revisions = [revision(&ds, "old", 1), revision(&ds, "new", 2)];
    let mut ctx = context(fake_client(|_, _| (404, json!({}))).0, &pods, &revisions);
    let (nodes, mut writer) = reflector::store::<CachedNode>();
    let node = |name: &str, ready: bool| CachedNode::from(crate::testkit::node(name, ready));
    for name in ["n1", "n2", "n3"] {
        writer.apply_watcher_event(&watcher::Event::Apply(node(name, true)));
    }
    ctx.stores.nodes = nodes.clone();
    let current = current_revision(&ctx.stores, &ds);
    let mut memo = Memo::default();
    let check = |memo: &Memo| {
        let mut held: Vec<&str> = memo.pods().map(|p| p.pod_name()).collect();
        held.sort();
        assert_eq!(held, ["a", "b"]);
        let store = nodes.state();
        assert_eq!(memo.nodes().count(), store.len());
        assert!(store
            .iter()
            .all(|n| memo.nodes().any(|kept| Arc::ptr_eq(kept, n))));
        let pending = Default::default();
        let vacated = Default::default();
        let fresh_pods = owned_pods(&ctx.stores, &ds, PodLookup::Index);
        let input = RollingInput {
            daemonset: &ds,
            current: current.as_ref(),
            pods: &fresh_pods,
            nodes: &store,
            max_unavailable: MaxUnavailable::Count(1),
            now: Timestamp::now(),
            expected_deletions: &pending,
            vacated_by_us: &vacated,
            limits: RollingLimits::default(),
            partition: None,
            node_selector: None,
            waves: None,
            proving: None,
            list_upcoming: true,
        };
        assert_eq!(
            plan_rolling_update_memo(&input, memo),
            crate::daemonset::rolling_plan::plan_rolling_update(&input)
        );
    };
    observe(&ctx.stores, &ds, current.as_ref(), &mut memo);
    check(&memo);
    // n2 flaps (a new version), n3 goes, n4 comes.
    writer.apply_watcher_event(&watcher::Event::Apply(node("n2", false)));
    writer.apply_watcher_event(&watcher::Event::Delete(node("n3", true)));
    writer.apply_watcher_event(&watcher::Event::Apply(node("n4", true)));
    observe(&ctx.stores, &ds, current.as_ref(), &mut memo);
    check(&memo);
}

fn ota() -> DaemonSet {
    DaemonSetBuilder::new("agent")
        .strategy("OTA")
        .on_delete()
        .build()
}

#[tokio::test]
async fn ota_marks_out_of_date_pods_as_rollgate_and_skips_a_pod_gone_meanwhile() {
    let ds = ota();
    let revisions = [revision(&ds, "h1", 1), revision(&ds, "h2", 2)];
    let pods = [
        PodBuilder::new("old", &ds).hash("h1").on_node("n1").build(),
        PodBuilder::new("gone", &ds)
            .hash("h1")
            .on_node("n2")
            .build(),
        PodBuilder::new("new", &ds).hash("h2").on_node("n3").build(),
    ];
    let (client, seen) = fake_client(|_, path| match path {
        p if p.ends_with("/gone/status") => status(404, "NotFound"),
        _ => (200, json!({})),
    });
    let ctx = context(client, &pods, &revisions);
    let action = mark_need_upgrade(&ds, &ctx).await.unwrap();
    assert_eq!(action, Action::requeue(RESYNC));

    let mut patches = seen.calls_to("PATCH");
    patches.sort_by_key(|c| c.path.clone());
    let written: Vec<(String, Value)> = patches
        .iter()
        .map(|c| {
            assert_eq!(c.field_manager(), Some("rollgate"), "{}", c.line());
            let condition = &c.body["status"]["conditions"][0];
            (c.path.clone(), condition["status"].clone())
        })
        .collect();
    assert_eq!(
        written,
        [
            (
                "/api/v1/namespaces/edge/pods/gone/status".into(),
                json!("True")
            ),
            (
                "/api/v1/namespaces/edge/pods/new/status".into(),
                json!("False")
            ),
            (
                "/api/v1/namespaces/edge/pods/old/status".into(),
                json!("True")
            ),
        ]
    );
    // Only our condition, as a strategic merge on the list (no pod UID: the message
    // names the revision, and a replaced pod is planned again).
    let body = &patches[2].body;
    assert!(body.get("metadata").is_none(), "{body}");
    assert_eq!(body["status"]["conditions"][0]["type"], "PodNeedUpgrade");
    assert_eq!(
        body["status"]["conditions"][0]["message"],
        "controllerrevision: h2"
    );
}

#[tokio::test]
async fn a_daemonset_no_longer_ota_loses_its_conditions() {
    let ds = DaemonSetBuilder::new("agent").on_delete().build();
    let marked = PodCondition {
        type_: POD_NEED_UPGRADE_CONDITION.into(),
        status: "True".into(),
        ..Default::default()
    };
    let pods = [
        PodBuilder::new("marked", &ds)
            .with_condition(marked)
            .build(),
        PodBuilder::new("clean", &ds).build(),
    ];
    let (client, seen) = fake_client(|_, _| (200, json!({})));
    let ctx = context(client, &pods, &[]);
    let cached: Vec<Arc<CachedPod>> = ctx.stores.pods.state();
    remove_leftover_conditions(&ds, &ctx, &cached)
        .await
        .unwrap();
    let patches = seen.calls_to("PATCH");
    assert_eq!(patches.len(), 1);
    assert_eq!(
        patches[0].line(),
        "PATCH /api/v1/namespaces/edge/pods/marked/status"
    );
    assert_eq!(
        patches[0].body,
        json!({"status": {"conditions": [{"type": "PodNeedUpgrade", "$patch": "delete"}]}})
    );
}

/// a -> b -> a: the DaemonSet reads a again (generation 3 observed), but the
/// revisions cache still has a at number 1 and b at 2; the API server has a at 3.
/// Two Ready nodes run a-pods, which the stale cache calls old.
fn rollback_bed(
    answer_list: serde_json::Value,
) -> (Context, DaemonSet, Arc<crate::apply::fake_api::Seen>) {
    let ds = DaemonSetBuilder::new("agent")
        .strategy("AdvancedRollingUpdate")
        .on_delete()
        .generations(3, 3)
        .build();
    let cached = [revision(&ds, "a", 1), revision(&ds, "b", 2)];
    let pods = [
        PodBuilder::new("p1", &ds)
            .hash("a")
            .on_node("n1")
            .ready_since(crate::testkit::at(0))
            .build(),
        PodBuilder::new("p2", &ds)
            .hash("a")
            .on_node("n2")
            .ready_since(crate::testkit::at(0))
            .build(),
    ];
    let (client, seen) = fake_client(move |method, path| match (method, path) {
        ("GET", p) if p.ends_with("/controllerrevisions") => (200, answer_list.clone()),
        _ => (200, json!({})),
    });
    let mut ctx = context(client, &pods, &cached);
    ctx.stores.nodes = store_of(
        ["n1", "n2"].map(|n| crate::object::CachedNode::from(crate::testkit::node(n, true))),
    );
    (ctx, ds, seen)
}

fn revision_list(revisions: &[ControllerRevision]) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "ControllerRevisionList",
        "metadata": {"resourceVersion": "7"},
        "items": revisions,
    })
}

async fn roll(ctx: &Context, ds: &DaemonSet) -> Action {
    let controls = Controls {
        max_unavailable: MaxUnavailable::Count(2),
        paused: false,
        partition: None,
        node_selector: None,
        waves: None,
        failure: Default::default(),
    };
    rolling_update(ds, ctx, controls).await.unwrap()
}

#[tokio::test]
async fn a_rollback_not_yet_in_the_revisions_cache_deletes_nothing_and_looks_again_soon() {
    let ds = DaemonSetBuilder::new("agent").generations(3, 3).build();
    let fresh = [revision(&ds, "b", 2), revision(&ds, "a", 3)];
    let (ctx, ds, seen) = rollback_bed(revision_list(&fresh));
    let action = roll(&ctx, &ds).await;
    assert!(seen.calls_to("DELETE").is_empty(), "{:?}", seen.calls());
    assert_eq!(action, Action::requeue(TARGET_RECHECK));
    // One quorum list of this DaemonSet's revisions (no resourceVersion).
    let lists = seen.calls_to("GET /apis/apps/v1/namespaces/edge/controllerrevisions");
    assert_eq!(lists.len(), 1, "{:?}", seen.calls());
    assert!(
        !lists[0].query.contains("resourceVersion"),
        "{}",
        lists[0].query
    );
    // Not verified, so not remembered: the next look reads the server again.
    roll(&ctx, &ds).await;
    assert_eq!(seen.calls_to("GET").len(), 2);
    assert!(seen.calls_to("DELETE").is_empty());
}

#[tokio::test]
async fn a_target_the_server_agrees_with_is_acted_on_and_read_once_per_generation() {
    let ds = DaemonSetBuilder::new("agent").generations(3, 3).build();
    // The server agrees with the cache: b (2) is the newest, so the a-pods are old.
    let fresh = [revision(&ds, "a", 1), revision(&ds, "b", 2)];
    let (ctx, ds, seen) = rollback_bed(revision_list(&fresh));
    roll(&ctx, &ds).await;
    let mut deleted: Vec<String> = seen
        .calls_to("DELETE")
        .iter()
        .map(|c| c.path.clone())
        .collect();
    deleted.sort();
    assert_eq!(
        deleted,
        [
            "/api/v1/namespaces/edge/pods/p1",
            "/api/v1/namespaces/edge/pods/p2"
        ]
    );
    assert_eq!(seen.calls_to("GET").len(), 1);
    // Same generation, same cached hash: proved already, no second read.
    ctx.expectations
        .lock()
        .unwrap()
        .forget_daemonset(&ds.uid().unwrap());
    roll(&ctx, &ds).await;
    assert_eq!(seen.calls_to("GET").len(), 1, "{:?}", seen.calls());
}

/// Both nodes are cut off, then come back, and the node triggers of their return
/// are lost: the plan that waited on them asked for a resync, and the resync's plan
/// (the same reconcile) replaces their pods.
#[tokio::test]
async fn a_missed_node_trigger_is_caught_by_the_resync() {
    let ds = DaemonSetBuilder::new("agent").generations(3, 3).build();
    let fresh = [revision(&ds, "a", 1), revision(&ds, "b", 2)];
    let (mut ctx, ds, seen) = rollback_bed(revision_list(&fresh));
    let nodes = |ready| {
        store_of(
            ["n1", "n2"].map(|n| crate::object::CachedNode::from(crate::testkit::node(n, ready))),
        )
    };
    ctx.stores.nodes = nodes(false);
    let action = roll(&ctx, &ds).await;
    assert!(seen.calls_to("DELETE").is_empty(), "{:?}", seen.calls());
    assert_eq!(action, Action::requeue(RESYNC), "a wait must come back");
    assert!(RESYNC <= Duration::from_secs(300));

    // Back, with no trigger: what the requeue runs deletes the old pods.
    ctx.stores.nodes = nodes(true);
    roll(&ctx, &ds).await;
    assert_eq!(seen.calls_to("DELETE").len(), 2, "{:?}", seen.calls());
}

#[tokio::test]
async fn a_wait_on_the_native_controller_past_the_threshold_says_so_once() {
    let ds = DaemonSetBuilder::new("agent")
        .strategy("AdvancedRollingUpdate")
        .on_delete()
        .generations(4, 3)
        .build();
    let (client, seen) = fake_client(|_, _| (200, json!({})));
    let mut ctx = context(client, &[], &[revision(&ds, "a", 1)]);
    ctx.stall_after = Duration::from_millis(50);
    let ctx = Arc::new(ctx);
    let stalled = |ctx: &Context| {
        ctx.metrics
            .native_controller_stalled
            .get_or_create(&super::super::metrics::DaemonSetLabels {
                namespace: "edge".into(),
                daemonset: "agent".into(),
            })
            .get()
    };
    // Within the threshold: no Event, and a look when it passes.
    let action = reconcile(Arc::new(ds.clone()), ctx.clone()).await.unwrap();
    assert!(seen.events().is_empty());
    assert_eq!(stalled(&ctx), 0);
    assert!(action != Action::await_change(), "{action:?}");
    tokio::time::sleep(Duration::from_millis(60)).await;
    for _ in 0..3 {
        reconcile(Arc::new(ds.clone()), ctx.clone()).await.unwrap();
    }
    assert_eq!(seen.events(), ["Warning NativeControllerStalled"]);
    assert_eq!(stalled(&ctx), 1);
    let note = &seen.calls_to("POST")[0].body["note"];
    assert!(note.as_str().unwrap().contains("generation 4"), "{note}");

    // The controller catches up: the gauge drops; a later stall is said again.
    let caught_up = DaemonSetBuilder::new("agent")
        .strategy("AdvancedRollingUpdate")
        .on_delete()
        .generations(4, 4)
        .build();
    reconcile(Arc::new(caught_up), ctx.clone()).await.unwrap();
    assert_eq!(stalled(&ctx), 0);
    reconcile(Arc::new(ds.clone()), ctx.clone()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(60)).await;
    reconcile(Arc::new(ds.clone()), ctx.clone()).await.unwrap();
    assert_eq!(seen.events().len(), 2, "{:?}", seen.events());
}

/// A rollout's deletions are said once per revision: kube's recorder would fold every
/// later UpgradingPods Event into the first (the note users see stays the first), so
/// each further one was an API write that only raised a count.
#[tokio::test]
async fn a_revisions_deletions_are_said_in_one_event() {
    let ds = DaemonSetBuilder::new("agent").generations(3, 3).build();
    let fresh = [revision(&ds, "a", 1), revision(&ds, "b", 2)];
    let (ctx, ds, seen) = rollback_bed(revision_list(&fresh));
    roll(&ctx, &ds).await;
    assert_eq!(seen.calls_to("DELETE").len(), 2, "{:?}", seen.calls());
    assert_eq!(seen.events(), ["Normal UpgradingPods"]);
    // The next plan of the same revision deletes again (the pods still read old once
    // the expectations are forgotten), and says nothing more.
    ctx.expectations
        .lock()
        .unwrap()
        .forget_daemonset(&ds.uid().unwrap());
    roll(&ctx, &ds).await;
    assert_eq!(seen.calls_to("DELETE").len(), 4, "{:?}", seen.calls());
    assert_eq!(seen.events(), ["Normal UpgradingPods"]);
}
