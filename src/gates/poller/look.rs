//! One look at a Service's load balancer: the class of work it belongs to, what the
//! reconcile before it found (which sets the next one's class and pace), and what it
//! costs in cloud calls.
/// Which class of work a Service's next look belongs to (the order they are served).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// A gate is pending (or the last cloud call failed): its flip waits on this look.
    Pending,
    /// Backends being drained or changed: the look confirms the change.
    Draining,
    /// Nothing pending: the look only checks that nothing moved.
    Settled,
}

impl Priority {
    pub const ALL: [Priority; 3] = [Priority::Pending, Priority::Draining, Priority::Settled];

    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            Priority::Pending => "pending",
            Priority::Draining => "draining",
            Priority::Settled => "settled",
        }
    }
}

/// What a reconcile found, as far as the next look is concerned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Gates of live pods not True after the plan.
    pub pending_gates: usize,
    /// Backend changes were sent (or tried).
    pub changed: bool,
    /// A drain deadline is still ahead.
    pub draining: bool,
    /// A cloud call failed.
    pub failed: bool,
    /// The load balancer refuses pod backends: waiting on the user, not on the cloud.
    pub refused: bool,
}

impl Outcome {
    /// The class of the next look, and whether it comes at the fast pace.
    pub fn next_look(self) -> (Priority, bool) {
        if self.refused {
            return (Priority::Settled, false);
        }
        if self.pending_gates > 0 || self.failed {
            return (Priority::Pending, true);
        }
        if self.changed {
            return (Priority::Draining, true);
        }
        if self.draining {
            return (Priority::Draining, false);
        }
        (Priority::Settled, false)
    }
}

/// Cloud calls one look at a Service costs: per listener, a listing of the group, a
/// health report, and the listener's target group (`Cloud::read_group`).
pub fn look_cost(listeners: usize) -> f64 {
    3.0 * listeners.max(1) as f64
}
