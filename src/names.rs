//! Every name rollgate shares with the outside world, spelled once: the condition
//! types and reasons it writes, the labels and annotations it reads and writes, its
//! field manager, its controller names and its Event reasons.
//!
//! These strings are a public interface: users' manifests, scripts and dashboards
//! name them, and OpenYurt's and Alibaba Cloud's tools expect their exact spelling.
//! Change one only as a breaking change. This module is on the floor of the crate: it
//! imports nothing of rollgate, so every layer may use it.

// ---------------------------------------------------------------------------------------
// Kubernetes' own names that rollgate reads or follows
// ---------------------------------------------------------------------------------------

/// Label on ControllerRevisions and pods naming the template revision's hash.
pub const CONTROLLER_REVISION_HASH_LABEL: &str = "controller-revision-hash";
/// Label on pods of older DaemonSets naming the template generation they were built from.
pub const POD_TEMPLATE_GENERATION_LABEL: &str = "pod-template-generation";
/// DaemonSet annotation holding the current template generation.
pub const TEMPLATE_GENERATION_ANNOTATION: &str = "deprecated.daemonset.template.generation";
/// The recommended label naming the tool that manages an object.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

// ---------------------------------------------------------------------------------------
// OpenYurt's interface (DaemonSet upgrade models, OTA)
// ---------------------------------------------------------------------------------------

/// Annotation selecting the upgrade model: `AdvancedRollingUpdate` or `OTA`.
pub const UPDATE_STRATEGY_ANNOTATION: &str = "apps.openyurt.io/update-strategy";
/// Annotation bounding AdvancedRollingUpdate: an integer or a percentage.
pub const MAX_UNAVAILABLE_ANNOTATION: &str = "apps.openyurt.io/max-unavailable";
/// AdvancedRollingUpdate: `true` stops every deletion (progress and status say paused);
/// `false` or absent goes on. OTA marking is not affected.
pub const PAUSED_ANNOTATION: &str = "rollgate.io/paused";
/// Warning: `rollgate.io/paused` is neither `true` nor `false`.
pub const INVALID_PAUSED_EVENT: &str = "InvalidPaused";
/// Normal: an AdvancedRollingUpdate rollout is paused (`rollgate.io/paused=true`).
pub const ROLLOUT_PAUSED_EVENT: &str = "RolloutPaused";
/// AdvancedRollingUpdate: how many of the DaemonSet's nodes (an integer or a percentage)
/// stay on the old revision; which ones is documented in `daemonset::controls`.
pub const PARTITION_ANNOTATION: &str = "rollgate.io/partition";
/// Warning: `rollgate.io/partition` is not an integer or a percentage up to 100%.
pub const INVALID_PARTITION_EVENT: &str = "InvalidPartition";
/// AdvancedRollingUpdate: a label selector (kubectl `-l` syntax); only the nodes that
/// match are upgraded, the others are held back.
pub const NODE_SELECTOR_ANNOTATION: &str = "rollgate.io/node-selector";
/// Warning: `rollgate.io/node-selector` does not parse as a label selector.
pub const INVALID_NODE_SELECTOR_EVENT: &str = "InvalidNodeSelector";
/// Normal: every node an AdvancedRollingUpdate may upgrade is done; the others are kept
/// old by `rollgate.io/partition` or held back by `rollgate.io/node-selector`.
pub const ROLLOUT_HELD_BACK_EVENT: &str = "RolloutHeldBack";
/// AdvancedRollingUpdate: `true` pulls the new images on the nodes the budget reaches
/// next, with the OTA pull Job, before their old pods are deleted; `false` or absent
/// does not.
pub const PULL_AHEAD_ANNOTATION: &str = "rollgate.io/pull-ahead";
/// Warning: `rollgate.io/pull-ahead` is neither `true` nor `false`.
pub const INVALID_PULL_AHEAD_EVENT: &str = "InvalidPullAhead";
/// Normal: pulls of the new images started on nodes the rollout reaches next.
pub const PULLING_AHEAD_EVENT: &str = "PullingImagesAhead";
/// Warning: a node's pulls failed too often; its old pod is replaced without the image.
pub const PULL_AHEAD_GAVE_UP_EVENT: &str = "PullAheadGaveUp";
/// AdvancedRollingUpdate: how many pods of the current revision may fail on Ready nodes
/// before the rollout acts (`rollgate.io/on-failure`): an integer from 1, or a whole
/// percentage from 1% to 100% of the pods the revision reached. Default 3.
pub const FAILURE_THRESHOLD_ANNOTATION: &str = "rollgate.io/failure-threshold";
/// Warning: `rollgate.io/failure-threshold` is not a positive integer or percentage.
pub const INVALID_FAILURE_THRESHOLD_EVENT: &str = "InvalidFailureThreshold";
/// AdvancedRollingUpdate: what a failing revision gets: `halt` (the default: no more
/// deletions for it), `rollback` (the template goes back to the previous revision) or
/// `continue` (failures are reported, the rollout goes on: how an operator resumes a
/// halted revision without a new template).
pub const ON_FAILURE_ANNOTATION: &str = "rollgate.io/on-failure";
/// Warning: `rollgate.io/on-failure` is not `halt`, `rollback` or `continue`.
pub const INVALID_ON_FAILURE_EVENT: &str = "InvalidOnFailure";
/// AdvancedRollingUpdate: a pod of the current revision on a Ready node that is not
/// available this long after its creation has failed (a duration: `90s`, `10m`);
/// absent or `0`: no deadline.
pub const PROGRESS_DEADLINE_ANNOTATION: &str = "rollgate.io/progress-deadline";
/// Warning: `rollgate.io/progress-deadline` is not a duration.
pub const INVALID_PROGRESS_DEADLINE_EVENT: &str = "InvalidProgressDeadline";
/// AdvancedRollingUpdate: the waves a rollout goes in, node selectors (the
/// `rollgate.io/node-selector` syntax) separated by `;`, `*` (every node left) only last.
/// Wave k+1 starts once every Ready node of wave k runs the new revision, available, for
/// `rollgate.io/wave-bake`.
pub const WAVES_ANNOTATION: &str = "rollgate.io/waves";
/// Warning: `rollgate.io/waves` is not a list of node selectors.
pub const INVALID_WAVES_EVENT: &str = "InvalidWaves";
/// AdvancedRollingUpdate: how long the last node of a wave runs the new revision, available,
/// before the next wave starts (a duration; default 5m).
pub const WAVE_BAKE_ANNOTATION: &str = "rollgate.io/wave-bake";
/// Warning: `rollgate.io/wave-bake` is not a duration.
pub const INVALID_WAVE_BAKE_EVENT: &str = "InvalidWaveBake";
/// Normal: a wave of the rollout starts (the one before it is proven and baked).
pub const WAVE_STARTED_EVENT: &str = "WaveStarted";
/// Warning: the current revision failed on more Ready nodes than the failure threshold
/// allows; rollgate deletes no more pods for it.
pub const ROLLOUT_HALTED_EVENT: &str = "RolloutHalted";
/// Warning: the current revision failed and `rollgate.io/on-failure: rollback` put the
/// template back to an earlier revision (what `kubectl rollout undo` does).
pub const ROLLED_BACK_EVENT: &str = "RolloutRolledBack";
/// Warning: the template is a revision rollgate rolled back from (it is in
/// `rollgate.io/rolled-back-from`); rollgate deletes no pod for it.
pub const REVISION_ROLLED_BACK_BEFORE_EVENT: &str = "RevisionRolledBackBefore";
/// AdvancedRollingUpdate, written by rollgate: the revision (its hash, else its template
/// generation) halted for its failures, while the halt holds; removed when it ends. A
/// restarted controller reads it, so a halt survives a restart.
pub const HALTED_REVISION_ANNOTATION: &str = "rollgate.io/halted-revision";
/// AdvancedRollingUpdate, written by rollgate: the hashes (`controller-revision-hash`) of
/// the revisions it rolled back from, comma-separated, newest last. rollgate never rolls
/// a revision in it out again; removing a hash is how an operator lets it try again.
pub const ROLLED_BACK_FROM_ANNOTATION: &str = "rollgate.io/rolled-back-from";
/// Pod condition type telling the node operator that the pod is out of date.
pub const POD_NEED_UPGRADE_CONDITION: &str = "PodNeedUpgrade";
/// Pod condition tracking the optional image pre-pull of the current revision.
pub const POD_IMAGE_READY_CONDITION: &str = "PodImageReady";
/// Reason written by the agent when an operator asks for a pre-pull.
pub const PULL_IMAGE_REQUESTED_REASON: &str = "PullImageRequested";
/// Reason of `PodImageReady=True` once the current revision's images are on the node.
pub const PULL_IMAGE_SUCCESS_REASON: &str = "PullImageSuccess";
/// Reason written by the image-pull controller when the pull Job failed.
pub const PULL_IMAGE_FAIL_REASON: &str = "PullImageFail";
/// Condition messages naming a revision (`PodNeedUpgrade`, `PodImageReady`) start so.
pub const REVISION_MESSAGE_PREFIX: &str = "controllerrevision: ";

// ---------------------------------------------------------------------------------------
// Alibaba Cloud's interface (load-balancer readiness gates)
// ---------------------------------------------------------------------------------------

/// Readiness-gate condition type prefix; the Service name follows (`.../my-svc`).
pub const GATE_PREFIX: &str = "service.readiness.alibabacloud.com/";
/// Attach to this load balancer instead of creating one.
pub const LOAD_BALANCER_ID_ANNOTATION: &str =
    "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-id";
/// The same, with the legacy prefix older manifests use.
pub const LEGACY_LOAD_BALANCER_ID_ANNOTATION: &str =
    "service.beta.kubernetes.io/alicloud-loadbalancer-id";
/// The prefixes of the Service annotations of Alibaba's cloud controller, current first
/// (the current one wins when both are set).
pub const LOAD_BALANCER_ANNOTATION_PREFIXES: &[&str] = &[
    "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-",
    "service.beta.kubernetes.io/alicloud-loadbalancer-",
];
/// `spec.loadBalancerClass` of an NLB Service.
pub const NLB_CLASS: &str = "alibabacloud.com/nlb";

// ---------------------------------------------------------------------------------------
// rollgate's own names
// ---------------------------------------------------------------------------------------

/// The one field manager of every write rollgate makes (the three controllers and the
/// node agent), as users see it in `managedFields` (`kubectl get -o yaml
/// --show-managed-fields`).
pub const FIELD_MANAGER: &str = "rollgate";
/// Reporting controller (`reportingController`) in Events of the DaemonSet upgrade
/// controller.
pub const DAEMONSET_CONTROLLER_NAME: &str = "rollgate-daemonset-upgrade";
/// Reporting controller in Events of the image-pull controller.
pub const IMAGE_PULL_CONTROLLER_NAME: &str = "rollgate-image-pull";
/// Reporting controller in Events of the readiness-gate controller.
pub const GATES_CONTROLLER_NAME: &str = "rollgate-readiness-gates";

/// The value of [`MANAGED_BY_LABEL`] on every pull Job, so the controller watches only
/// its own Jobs.
pub const MANAGED_BY_VALUE: &str = "rollgate";
/// Pull Job label: UID of the pod the Job pulls for (pod names can exceed a label
/// value's 63 chars).
pub const PULL_JOB_POD_UID_LABEL: &str = "rollgate.io/image-pull-pod-uid";
/// Pull Job label: `controller-revision-hash` of the revision whose images the Job pulls.
pub const PULL_JOB_REVISION_LABEL: &str = "rollgate.io/image-pull-revision";
/// Pull Job annotation: the request a Job answers, the `lastTransitionTime` of the
/// `PullImageRequested` condition it was created for. A finished Job answers only that
/// request, so asking again after a failure pulls again (clock-independent: the agent's
/// clock may differ from the API server's).
pub const PULL_JOB_REQUEST_ANNOTATION: &str = "rollgate.io/image-pull-request";
/// Pull Job annotation: the name of the pod the Job pulls for.
pub const PULL_JOB_POD_NAME_ANNOTATION: &str = "rollgate.io/image-pull-pod";
/// Pull Job annotation: the node the Job pulls on.
pub const PULL_JOB_NODE_ANNOTATION: &str = "rollgate.io/image-pull-node";
/// DaemonSet annotation: how long its pull Jobs may take (`600`, `600s`, `90m`, `2h`),
/// instead of `--prepull-deadline`. rollgate's own domain, like the other pull names:
/// OpenYurt has no such setting, and an `apps.openyurt.io` name would suggest it does.
pub const PULL_DEADLINE_ANNOTATION: &str = "rollgate.io/image-pull-deadline";

/// Label of the readiness-gate injection webhook, on a namespace (`enabled`: its new pods
/// get a gate per managed Service that selects them) and on a pod (`disabled`: left alone).
pub const GATE_INJECT_LABEL: &str = "rollgate.io/readiness-gate-inject";
/// [`GATE_INJECT_LABEL`] on a namespace: inject gates into its new pods.
pub const GATE_INJECT_ENABLED: &str = "enabled";
/// [`GATE_INJECT_LABEL`] on a pod: no gate injected into it.
pub const GATE_INJECT_DISABLED: &str = "disabled";
/// The namespace of Kubernetes' own components, never injected into.
pub const KUBE_SYSTEM_NAMESPACE: &str = "kube-system";

/// Opt-in Service annotation: a True gate goes back to False when its backend is lost
/// or unhealthy.
pub const FLIP_BACK_ANNOTATION: &str = "rollgate.io/readiness-gate-flip-back";
/// Opt-in Service annotation (a duration): a gate still not True that long after its
/// pod's containers turned ready turns True with reason `GateTimedOut` (fail-open).
pub const GATE_TIMEOUT_ANNOTATION: &str = "rollgate.io/readiness-gate-timeout";
/// Where rollgate records a load balancer it created (and so may delete).
pub const CREATED_ID_ANNOTATION: &str = "rollgate.io/created-load-balancer-id";
/// Where rollgate records the load balancer the user named (`...-loadbalancer-id`) that
/// it registers backends in: when the user names another (or none), rollgate's backends
/// leave this one, even after a restart.
pub const SERVED_ATTACHED_ID_ANNOTATION: &str = "rollgate.io/attached-load-balancer-id";
/// Where rollgate publishes, on a Service it serves, the listeners and server groups its
/// backends are registered in: JSON `[{"port", "protocol", "loadBalancerId",
/// "listenerId" (NLB only), "serverGroupId"}]`, for `kubectl rollgate gates` and for
/// users, who otherwise find the group ids only in the cloud console. Written when it
/// changes; removed when rollgate lets go of the Service.
pub const SERVER_GROUPS_ANNOTATION: &str = "rollgate.io/server-groups";
/// Held while rollgate may still have cloud resources to clean up for the Service.
pub const LOAD_BALANCER_FINALIZER: &str = "rollgate.io/load-balancer";
/// Alibaba's annotation (read under both prefixes, any non-empty value, as Alibaba's
/// controller reads it): a load balancer rollgate created outlives its Service; only
/// rollgate's backends are taken out of it.
pub const PRESERVE_LB_ON_DELETE_ANNOTATION: &str =
    "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-preserve-lb-on-delete";
/// `spec.loadBalancerClass` of a CLB Service rollgate manages beside Alibaba's controller.
pub const ROLLGATE_CLB_CLASS: &str = "rollgate.io/clb";
/// `spec.loadBalancerClass` of an NLB Service rollgate manages beside Alibaba's controller.
pub const ROLLGATE_NLB_CLASS: &str = "rollgate.io/nlb";
/// Tag key on what rollgate creates in the cloud (load balancers; NLB server groups):
/// the value is the cluster id (`--cluster-id`, by default the `kube-system`
/// namespace's UID). A resource whose tag names another cluster is never adopted,
/// changed or deleted; NLB server groups are looked up by it.
pub const CLUSTER_ID_TAG: &str = "rollgate.io/cluster-id";
/// Tag key on what rollgate creates in the cloud: the UID of the Service it serves.
pub const SERVICE_UID_TAG: &str = "rollgate.io/service-uid";
/// Set by the system on pods that run as elastic container instances (virtual nodes,
/// ACK Serverless): the instance id (`eci-…`), a CLB `eci` backend's `ServerId`.
pub const ECI_INSTANCE_ID_ANNOTATION: &str = "k8s.aliyun.com/eci-instance-id";

// ---------------------------------------------------------------------------------------
// Event reasons
// ---------------------------------------------------------------------------------------

/// Warning: another updater (yurt-manager's daemonpodupdater) deletes this DaemonSet's
/// pods; rollgate deletes nothing there until it has been quiet.
pub const ANOTHER_UPDATER_ACTIVE_EVENT: &str = "AnotherUpdaterActive";

/// Warning on a DaemonSet annotated for rollgate whose `updateStrategy` is not OnDelete.
pub const UPDATE_STRATEGY_NOT_ON_DELETE_EVENT: &str = "UpdateStrategyNotOnDelete";
/// Warning on a DaemonSet whose update-strategy annotation names no model.
pub const UNKNOWN_UPDATE_STRATEGY_EVENT: &str = "UnknownUpdateStrategy";
/// Warning on a DaemonSet whose max-unavailable annotation cannot be read.
pub const INVALID_MAX_UNAVAILABLE_EVENT: &str = "InvalidMaxUnavailable";
/// Old pods deleted for an AdvancedRollingUpdate.
pub const UPGRADING_PODS_EVENT: &str = "UpgradingPods";
/// Every node runs the current revision.
pub const ROLLOUT_COMPLETE_EVENT: &str = "RolloutComplete";
/// The rollout waits for NotReady nodes to come back.
pub const WAITING_FOR_NOT_READY_NODES_EVENT: &str = "WaitingForNotReadyNodes";
/// Warning: old pods are kept on nodes where the DaemonSet no longer places a pod.
pub const OLD_PODS_ON_UNPLACED_NODES_EVENT: &str = "OldPodsOnUnplacedNodes";
/// The rollout waits for the native controller's newest ControllerRevision.
pub const CURRENT_REVISION_UNKNOWN_EVENT: &str = "CurrentRevisionUnknown";
/// Warning: the rollout has waited on the native DaemonSet controller (generation not
/// observed, no ControllerRevision, or a cached revision behind the API server's) longer
/// than `--native-controller-stall-after`.
pub const NATIVE_CONTROLLER_STALLED_EVENT: &str = "NativeControllerStalled";
/// A pull Job was created for a pod.
pub const PULL_IMAGE_STARTED_EVENT: &str = "PullImageStarted";
/// Warning on a DaemonSet whose pull-deadline annotation cannot be read.
pub const INVALID_PULL_DEADLINE_EVENT: &str = "InvalidImagePullDeadline";
/// A pull Job's name is held by a Job rollgate must not touch.
pub const PULL_IMAGE_JOB_NAME_CONFLICT_EVENT: &str = "PullImageJobNameConflict";
/// Warning: a readiness gate names a Service that does not exist.
pub const SERVICE_NOT_FOUND_EVENT: &str = "ServiceNotFound";
/// Warning: a readiness gate names a Service that is not `type: LoadBalancer`.
pub const SERVICE_NOT_LOAD_BALANCER_EVENT: &str = "ServiceNotLoadBalancer";
/// Warning: a Service's load-balancer annotation cannot be read.
pub const INVALID_ANNOTATION_EVENT: &str = "InvalidLoadBalancerAnnotation";
/// Warning on a Service: an annotation of the Alibaba family that rollgate does not act
/// on (not supported yet, or not applicable), named in the message; once per annotation.
pub const UNSUPPORTED_ANNOTATION_EVENT: &str = "UnsupportedLoadBalancerAnnotation";
/// Warning on a Service: pods whose IPs are outside the VPC are not registered.
pub const POD_IP_OUTSIDE_VPC_EVENT: &str = "PodIpOutsideVpc";
/// Warning on a Service: its CLB instance takes no ENI/ECI backends (shared-resource).
pub const LOAD_BALANCER_TAKES_NO_POD_BACKENDS_EVENT: &str = "LoadBalancerTakesNoPodBackends";

/// Warning on a Service: a load balancer or server group it would use is tagged for
/// another cluster (`rollgate.io/cluster-id`), so rollgate leaves it alone; the message
/// names the resource and the other cluster. Once per cause.
pub const OTHER_CLUSTERS_RESOURCE_EVENT: &str = "LoadBalancerOfAnotherCluster";
/// Warning on a Service whose CLB listener was found stopped (its start after creation
/// failed, or someone stopped it) and that rollgate started. Once per listener.
pub const LISTENER_STOPPED_EVENT: &str = "ListenerStopped";
/// Warning on a Service whose load balancer or backends an account quota refuses
/// (the quota and how to raise it in the note). Once per quota message.
pub const CLOUD_QUOTA_EXCEEDED_EVENT: &str = "CloudQuotaExceeded";

/// Warning on a Service being let go of: its cloud cleanup cannot proceed (the cloud
/// unreachable, credentials refused, ...), so the finalizer stays. Once per cause.
pub const CLEANUP_BLOCKED_EVENT: &str = "LoadBalancerCleanupBlocked";
/// Warning on a pod and on its Service: the pod's gate timed out
/// (`rollgate.io/readiness-gate-timeout`) and turned True without a healthy backend;
/// the note names the reason it last waited on.
pub const GATE_TIMED_OUT_EVENT: &str = "GateTimedOut";

// ---------------------------------------------------------------------------------------
// Readiness-gate condition reasons
// ---------------------------------------------------------------------------------------

macro_rules! gate_reasons {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        /// The CamelCase `reason` of a readiness-gate condition.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum GateReason { $($(#[$doc])* $name),* }

        impl GateReason {
            pub const ALL: &'static [GateReason] = &[$(GateReason::$name),*];
            pub fn as_str(self) -> &'static str {
                match self { $(GateReason::$name => stringify!($name)),* }
            }
        }
    };
}

gate_reasons! {
    /// True: registered and healthy in every server group of the Service.
    LoadBalancerHealthy,
    /// True: registered everywhere, but a listener has health checks off.
    RegisteredHealthCheckDisabled,
    /// Still True (default) although a backend was lost or turned unhealthy after Ready.
    BackendLostAfterReady,
    /// Waiting for the backend to appear in a server group.
    BackendNotRegistered,
    /// Registered; the load balancer has no health verdict yet.
    HealthCheckPending,
    /// Registered; the load balancer reports it unhealthy (reason code in the message).
    BackendUnhealthy,
    /// The pod's containers are not ready (or it has no IP): it is not registered.
    ContainersNotReady,
    /// A named targetPort of the Service is not a port of the pod.
    TargetPortNotFound,
    /// The gate names a Service whose selector does not match the pod.
    PodNotSelected,
    /// The gate names a Service that does not exist in the pod's namespace.
    ServiceNotFound,
    /// The gate names a Service that is not `type: LoadBalancer`.
    ServiceNotLoadBalancer,
    /// The load balancer is being created, or has no address yet.
    LoadBalancerNotReady,
    /// A cloud call failed (action, error code and request id in the message).
    CloudApiError,
    /// A cloud call was refused because an account quota is used up (load balancer
    /// instances, servers per load balancer or group): the message names the quota and
    /// how to raise it. Retried on the slow poll; nothing is deleted or re-created.
    CloudQuotaExceeded,
    /// The pod IP is outside the VPC's CIDR blocks (an overlay IP): no ENI can hold it,
    /// so it is never registered.
    PodIpOutsideVpc,
    /// The pod IP is inside the VPC but no ENI holds it yet: retried.
    EniNotFound,
    /// The listener on a Service port forwards to another server group (named in the
    /// message), so the pod would get no traffic: no gate turns True.
    ListenerNotForwarding,
    /// The Service's CLB instance is shared-resource (no spec, pay-by-spec): CLB takes
    /// ENI and ECI backends only on performance-guaranteed instances, so no pod can be
    /// registered. The message names the instance and its spec.
    LoadBalancerTakesNoPodBackends,
    /// An annotation of the Service is not valid (or an NLB to create has no zone
    /// maps): nothing is asked of the cloud. The message names the annotation and the
    /// accepted forms. A gate already True stays True.
    InvalidLoadBalancerAnnotation,
    /// True without a healthy backend: the Service's `rollgate.io/readiness-gate-timeout`
    /// passed since the pod's containers turned ready (the message names the reason it
    /// last waited on). Opt-in.
    GateTimedOut,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_reasons_are_camel_case_and_listed_in_the_configuration_reference() {
        let readme = include_str!("../docs/configuration.md");
        for reason in GateReason::ALL {
            let s = reason.as_str();
            assert!(s.chars().next().unwrap().is_ascii_uppercase(), "{s}");
            assert!(s.chars().all(|c| c.is_ascii_alphanumeric()), "{s}");
            assert!(
                readme.contains(&format!("`{s}`")),
                "docs/configuration.md lacks reason {s}"
            );
        }
    }
}
