//! The product-neutral face of the client: the trait the controller programs
//! against, whether CLB or NLB is behind it. It lives here rather than in lib.rs so
//! that `clb` and `nlb`, which implement it, need not import the crate root that
//! re-exports them.

use crate::config::Product;
use crate::error::Result;
use crate::model::{
    Backend, BackendHealth, BackendKey, GroupReading, ListenerWiring, LoadBalancer,
    LoadBalancerSpec, ServerGroupRef, Tag, Wiring,
};

/// What the readiness-gate controller needs from a cloud load balancer.
#[async_trait::async_trait]
pub trait LoadBalancerBackends: Send + Sync + std::fmt::Debug {
    fn product(&self) -> Product;

    /// Attaches to `spec.existing_id` or creates a load balancer, then makes sure
    /// each listener and its server group exist. Idempotent.
    async fn ensure_load_balancer(&self, spec: &LoadBalancerSpec) -> Result<LoadBalancer>;

    /// Deletes a load balancer we created (with its listeners).
    async fn delete_load_balancer(&self, load_balancer_id: &str) -> Result<()>;

    /// The tags the load balancer carries (read only); `None`: it does not exist.
    /// Read before a delete, so that one tagged for another cluster is never deleted.
    async fn load_balancer_tags(&self, load_balancer_id: &str) -> Result<Option<Vec<Tag>>>;

    /// Every server group of the load balancer, read only (nothing is created): all
    /// its vServer groups (CLB), or the groups its listeners forward to (NLB, whose
    /// groups belong to the region, not to a load balancer). `None`: the load balancer
    /// does not exist. What letting go of a Service reads, so that a load balancer the
    /// user already deleted is not an error and nothing is created on the way out.
    async fn server_groups(&self, load_balancer_id: &str) -> Result<Option<Vec<ServerGroupRef>>>;

    /// The load balancer's listeners and groups (read only); `None`: it does not exist.
    async fn wiring(&self, load_balancer_id: &str) -> Result<Option<Wiring>>;

    /// Deletes one listener; one already gone is not an error.
    async fn delete_listener(
        &self,
        load_balancer_id: &str,
        listener: &ListenerWiring,
    ) -> Result<()>;

    /// Deletes one server group (no listener may forward to it); one already gone is
    /// not an error.
    async fn delete_server_group(&self, server_group_id: &str) -> Result<()>;

    /// Every backend of the group, ours or not (callers filter by description).
    async fn list_backends(&self, group: &ServerGroupRef) -> Result<Vec<Backend>>;

    /// Registers backends, in batches the API accepts. Backends already present
    /// are skipped.
    async fn add_backends(&self, group: &ServerGroupRef, backends: &[Backend]) -> Result<()>;

    /// Deregisters backends, in batches.
    async fn remove_backends(&self, group: &ServerGroupRef, backends: &[BackendKey]) -> Result<()>;

    /// Sets the weight of registered backends (weight 0 drains).
    async fn set_weights(&self, group: &ServerGroupRef, backends: &[Backend]) -> Result<()>;

    /// Every backend of the group and its health, from one listing of the group and
    /// one health report: what a reconcile reads.
    async fn read_group(&self, group: &ServerGroupRef) -> Result<GroupReading>;

    /// The server group the listener in front of `group` (its port and protocol)
    /// forwards to, as last read (trusted for 30 s); `None` when there is no such
    /// listener. A gate means something only when this is `group` itself.
    async fn listener_server_group(&self, group: &ServerGroupRef) -> Result<Option<String>>;

    /// Whether the listener in front of `group` is stopped, as last read with
    /// [`Self::listener_server_group`] (no call of its own while that is fresh). CLB
    /// creates a listener stopped and starts it with a second call; if that call
    /// failed, the listener stays stopped and every backend reads `unavailable`
    /// forever. NLB listeners run from creation: always `false`.
    async fn listener_stopped(&self, _group: &ServerGroupRef) -> Result<bool> {
        Ok(false)
    }

    /// Starts the stopped listener in front of `group` (CLB only; NLB: nothing to do).
    async fn start_listener(&self, _group: &ServerGroupRef) -> Result<()> {
        Ok(())
    }

    /// Throttling answers this client has had so far (retried ones included), for a
    /// caller that paces its calls; 0 for clients that cannot be throttled.
    fn throttled_answers(&self) -> u64 {
        0
    }

    /// Calls this client has made so far (each retry included), for a caller that
    /// keeps all of them inside its budget; 0 for clients that make none.
    fn calls_made(&self) -> u64 {
        0
    }

    /// Calls and throttling answers per API action so far (each retry included), for
    /// the metrics that say which action's quota is the one being hit.
    fn action_counts(&self) -> Vec<crate::transport::ActionCount> {
        vec![]
    }

    /// Health of each registered backend as the load balancer sees it.
    async fn backend_health(&self, group: &ServerGroupRef) -> Result<Vec<BackendHealth>> {
        Ok(self.read_group(group).await?.health)
    }
}
