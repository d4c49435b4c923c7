//! Which load balancer a Service left, from the record rollgate keeps on it
//! (`rollgate.io/attached-load-balancer-id`) and what its annotations name now (pure).
//! `apply` acts on it while the Service lives, `cleanup` when it goes.

/// What to do about the attached load balancer on record (pure).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttachedMove {
    /// The record is right: nothing to do.
    Stay,
    /// Nothing recorded yet (a new Service, or one served by an earlier version):
    /// record the attached one before registering anything in it.
    Record(String),
    /// The user named another load balancer, or none: take rollgate's backends out of
    /// the former one (unless it is the one rollgate created, whose own cleanup runs),
    /// then record the current one (`None`: clear the record).
    LeaveFormer {
        former: String,
        remove_backends: bool,
        now: Option<String>,
    },
}

/// Compares the record with the annotation. `created` is the load balancer rollgate
/// made, let go of by its own rules (`cleanup::let_go_of_replaced`).
pub fn attached_move(
    served: Option<&str>,
    attached: Option<&str>,
    created: Option<&str>,
) -> AttachedMove {
    match (served, attached) {
        (None, None) => AttachedMove::Stay,
        (None, Some(now)) => AttachedMove::Record(now.to_string()),
        (Some(former), now) if Some(former) == now => AttachedMove::Stay,
        (Some(former), now) => AttachedMove::LeaveFormer {
            former: former.to_string(),
            remove_backends: Some(former) != created,
            now: now.map(str::to_string),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the case is about, the served, attached and created ids, the move.
    type Case<'a> = (
        &'a str,
        Option<&'a str>,
        Option<&'a str>,
        Option<&'a str>,
        AttachedMove,
    );

    #[test]
    fn a_move_off_the_served_load_balancer_takes_our_backends_out_of_it_once() {
        let leave = |former: &str, remove: bool, now: Option<&str>| AttachedMove::LeaveFormer {
            former: former.into(),
            remove_backends: remove,
            now: now.map(str::to_string),
        };
        #[rustfmt::skip]
        let cases: &[Case] = &[
            ("nothing named, nothing served", None, None, None, AttachedMove::Stay),
            ("a created one only", None, None, Some("lb-made"), AttachedMove::Stay),
            ("first served: recorded before anything is registered", None, Some("lb-a"), None, AttachedMove::Record("lb-a".into())),
            ("served and still named", Some("lb-a"), Some("lb-a"), None, AttachedMove::Stay),
            ("attached to attached", Some("lb-a"), Some("lb-b"), None, leave("lb-a", true, Some("lb-b"))),
            ("attached to none (rollgate will create one)", Some("lb-a"), None, None, leave("lb-a", true, None)),
            ("the former one is rollgate's own: its cleanup rules apply", Some("lb-made"), Some("lb-b"), Some("lb-made"), leave("lb-made", false, Some("lb-b"))),
        ];
        for (case, served, attached, created, want) in cases {
            assert_eq!(&attached_move(*served, *attached, *created), want, "{case}");
        }
    }
}
