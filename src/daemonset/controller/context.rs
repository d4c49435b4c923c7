//! What the controller keeps between reconciles: its clients and the shared stores, and
//! per DaemonSet UID the state each step reads and updates (expectations, waits, pull
//! counts, plan memos).
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Client;

use crate::apply::{EventDedup, Events, Writer};
use crate::daemonset::expectations::Expectations;
use crate::daemonset::metrics::DaemonSetMetrics;
use crate::daemonset::native_wait::NativeWaits;
use crate::daemonset::other_updater::OtherUpdaters;
use crate::daemonset::pull_ahead::{PullAheadLimits, PullTries, UnseenRequests};
use crate::daemonset::revision::VerifiedTarget;
use crate::daemonset::rolling_plan::{PlanMemo, RollingLimits};
use crate::object::{CachedNode, CachedPod};
use crate::watch::Stores;

pub struct Context {
    pub(super) client: Client,
    pub(super) writer: Writer,
    pub(super) stores: Stores,
    pub(super) events: Events,
    pub(super) metrics: DaemonSetMetrics,
    pub(super) expectations: Mutex<Expectations>,
    pub(super) said: EventDedup,
    pub(super) limits: RollingLimits,
    pub(super) other_updaters: Arc<OtherUpdaters>,
    /// Targets proved consistent with their DaemonSet (see `revision::check_target`),
    /// by DaemonSet UID: the fresh read is skipped while the key stays the same.
    pub(super) verified: Mutex<HashMap<String, VerifiedTarget>>,
    /// DaemonSets waiting on the native controller, since when.
    pub(super) waits: Mutex<NativeWaits>,
    /// A wait on the native controller longer than this is a stall (Warning, metric).
    pub(super) stall_after: Duration,
    pub(super) pull_ahead: PullAheadLimits,
    /// Failed pull-ahead pulls per pod, by DaemonSet UID (see `pull_ahead::PullTries`).
    pub(super) pull_tries: Mutex<HashMap<String, PullTries>>,
    /// Pull requests written but not yet in the cache, by DaemonSet UID.
    pub(super) pull_unseen: Mutex<HashMap<String, UnseenRequests>>,
    /// What the plans of a rolling DaemonSet read of its pods and nodes, kept between
    /// its plans by object version (`rolling_plan::PlanMemo`), by DaemonSet UID. Only
    /// while it rolls out: dropped once its plan is complete or held back, or it is no
    /// longer AdvancedRollingUpdate, so a settled fleet keeps none.
    pub(super) plan_memos: Mutex<HashMap<String, Memo>>,
    /// The revision each halted DaemonSet halted on, by DaemonSet UID (see
    /// `failure`: the halt holds while any of its pods is failed). Lost on a restart:
    /// the threshold then decides afresh.
    pub(super) halted: Mutex<HashMap<String, String>>,
}

/// A rolling DaemonSet's plan memo in the controller.
pub type Memo = PlanMemo<CachedPod, CachedNode>;
