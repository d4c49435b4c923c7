//! The scheduler's table and property tests: pace, order, reserve, slots, budgets,
//! throttling and debt, on a simulated clock.
use proptest::prelude::*;

use std::collections::HashMap;
use std::time::Duration;

use alibaba_lb::Product;
use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::ObjectRef;
use tokio::time::Instant;

use super::budget::SETTLED_SHARE;
use super::schedule::product_index;
use super::*;

const MS: Duration = Duration::from_millis(1);

fn key(name: &str) -> ObjectRef<Service> {
    ObjectRef::new(name).within("ns")
}

fn outcome(priority: Priority) -> Outcome {
    match priority {
        Priority::Pending => Outcome {
            pending_gates: 1,
            ..Outcome::default()
        },
        Priority::Draining => Outcome {
            changed: true,
            ..Outcome::default()
        },
        Priority::Settled => Outcome::default(),
    }
}

/// A schedule of `rate` calls a second (looks due after 500 ms pending, 10 s
/// settled) from `start`.
fn schedule(rate: f64, start: Instant) -> Schedule {
    Schedule::new(
        500 * MS,
        Duration::from_secs(10),
        CloudPace::within_quotas(rate),
        8,
        start,
    )
}

/// The reconcile of `name` (a CLB Service with one listener) reported back at `at`,
/// having found it `priority`.
fn look(s: &mut Schedule, name: &str, priority: Priority, at: Instant) {
    s.polled(key(name), Product::Clb, 1, outcome(priority), at, at);
}

/// A schedule of `rate` with one pending Service, `p`, looked at at `start`.
fn one_pending(rate: f64, start: Instant) -> Schedule {
    let mut s = schedule(rate, start);
    look(&mut s, "p", Priority::Pending, start);
    s
}

#[test]
fn the_next_look_follows_what_the_reconcile_found() {
    #[rustfmt::skip]
    let cases = [
        ("settled", Outcome::default(), (Priority::Settled, false)),
        ("a gate pending", Outcome { pending_gates: 2, ..Outcome::default() }, (Priority::Pending, true)),
        ("a failed call", Outcome { failed: true, ..Outcome::default() }, (Priority::Pending, true)),
        ("backends changed", Outcome { changed: true, ..Outcome::default() }, (Priority::Draining, true)),
        ("a drain ahead", Outcome { draining: true, ..Outcome::default() }, (Priority::Draining, false)),
        ("refused, gates pending", Outcome { refused: true, pending_gates: 3, ..Outcome::default() }, (Priority::Settled, false)),
    ];
    for (case, outcome, want) in cases {
        assert_eq!(outcome.next_look(), want, "{case}");
    }
}

#[test]
fn a_pending_service_is_due_fast_and_a_settled_one_slow_after_its_last_look() {
    let start = Instant::now();
    let mut s = schedule(10.0, start);
    look(&mut s, "pending", Priority::Pending, start);
    look(&mut s, "settled", Priority::Settled, start);
    assert!(s.grant(start + 499 * MS).is_empty());
    let at_500 = s.grant(start + 500 * MS);
    assert_eq!(at_500.len(), 1);
    assert_eq!(at_500[0].service, key("pending"));
    assert!(s.granted(&key("pending")));
    // Granted once only, until the reconcile reports back.
    assert!(s.grant(start + 600 * MS).is_empty());
    look(&mut s, "pending", Priority::Settled, start + 600 * MS);
    assert!(!s.granted(&key("pending")));
    let at_10s = s.grant(start + Duration::from_secs(10));
    assert_eq!(
        at_10s
            .iter()
            .map(|g| g.service.name.as_str())
            .collect::<Vec<_>>(),
        ["settled"]
    );
}

#[test]
fn a_reading_is_reused_until_its_look_is_due_and_never_while_a_look_is_granted() {
    let start = Instant::now();
    let mut s = schedule(10.0, start);
    assert_eq!(s.read_rule(&key("new")), ReadRule::ReuseOrRead(500 * MS));
    look(&mut s, "p", Priority::Pending, start);
    look(&mut s, "s", Priority::Settled, start);
    assert_eq!(s.read_rule(&key("p")), ReadRule::ReuseOrAsk(500 * MS));
    assert_eq!(
        s.read_rule(&key("s")),
        ReadRule::ReuseOrAsk(Duration::from_secs(10))
    );
    assert_eq!(s.grant(start + 500 * MS).len(), 1);
    assert_eq!(s.read_rule(&key("p")), ReadRule::Read);
}

#[test]
fn a_look_an_event_asks_for_goes_at_once_but_behind_the_looks_asked_before_it() {
    let start = Instant::now();
    let mut s = schedule(3.0, start);
    look(&mut s, "s", Priority::Settled, start);
    assert!(s.grant(start + 100 * MS).is_empty(), "settled: due in 10 s");
    s.look_now(&key("s"), start + 100 * MS);
    let grants = s.grant(start + 100 * MS);
    assert_eq!(grants.len(), 1, "the budget is free: at once");
    assert_eq!(grants[0].priority, Priority::Pending);
    // With the budget in debt, "b" asks at 1 s and "a" at 2 s: they go in that order
    // (not the names'), both as soon as the budget allows, long before their 10 s.
    let then = start + 1_000 * MS;
    for name in ["a", "b"] {
        look(&mut s, name, Priority::Settled, then);
    }
    s.charge(Product::Clb, 10.0, then);
    s.look_now(&key("b"), then);
    let mut order = vec![];
    for tick in 0..100 {
        let now = then + tick * 50 * MS;
        if tick == 20 {
            s.look_now(&key("a"), now);
        }
        order.extend(s.grant(now).into_iter().map(|g| g.service.name));
    }
    assert_eq!(order, ["b", "a"]);
    s.look_now(&key("unknown"), start);
    assert!(!s.granted(&key("unknown")));
}

#[test]
fn a_grant_made_while_a_reconcile_ran_outlives_that_reconcile() {
    let start = Instant::now();
    let mut s = one_pending(10.0, start);
    // A pod event's reconcile starts at 400 ms; the look is granted at 500 ms.
    let started = start + 400 * MS;
    assert_eq!(s.grant(start + 500 * MS).len(), 1);
    s.polled(
        key("p"),
        Product::Clb,
        1,
        outcome(Priority::Pending),
        start,
        started,
    );
    assert!(
        s.granted(&key("p")),
        "the granted reconcile is still to come"
    );
    // The granted one reports back: done.
    s.polled(
        key("p"),
        Product::Clb,
        1,
        outcome(Priority::Pending),
        start + 600 * MS,
        start + 550 * MS,
    );
    assert!(!s.granted(&key("p")));
}

#[test]
fn a_failed_write_brings_a_settled_services_look_forward_to_the_fast_interval() {
    let start = Instant::now();
    let mut s = schedule(10.0, start);
    look(&mut s, "s", Priority::Settled, start);
    assert!(s.grant(start + 600 * MS).is_empty(), "settled: due in 10 s");
    s.look_again_soon(&key("s"), start + 600 * MS);
    assert!(s.grant(start + 1_000 * MS).is_empty());
    let grants = s.grant(start + 1_100 * MS);
    assert_eq!(grants.len(), 1);
    assert_eq!(grants[0].service, key("s"));
    // Never later than it was due already, and nothing for a Service not polled.
    look(&mut s, "p", Priority::Pending, start + 2_000 * MS);
    s.look_again_soon(&key("p"), start + 2_400 * MS);
    assert_eq!(s.grant(start + 2_500 * MS).len(), 1);
    s.look_again_soon(&key("unknown"), start);
    assert!(!s.granted(&key("unknown")));
}

#[test]
fn a_look_asked_for_soon_during_a_reconcile_outlasts_that_reconciles_report() {
    let start = Instant::now();
    let mut s = schedule(10.0, start);
    look(&mut s, "s", Priority::Settled, start);
    // A reconcile starts at 1 s; a write its plan left out waited for one in flight,
    // answered at 1.1 s; the reconcile reports a settled Service at 1.2 s.
    s.look_again_soon(&key("s"), start + 1_100 * MS);
    look(&mut s, "s", Priority::Settled, start + 1_000 * MS);
    assert!(s.grant(start + 1_500 * MS).is_empty());
    assert_eq!(
        s.grant(start + 1_600 * MS).len(),
        1,
        "due the fast interval after the ask, not the slow one after the look"
    );
    // An ask before the reconcile started was served by it.
    s.look_again_soon(&key("s"), start + 2_000 * MS);
    look(&mut s, "s", Priority::Settled, start + 2_050 * MS);
    assert!(
        s.grant(start + 5_000 * MS).is_empty(),
        "settled: due in 10 s"
    );
}

/// `n` settled CLB Services of one listener, `s0`.., looked at at `at`.
fn settled(s: &mut Schedule, n: usize, at: Instant) {
    for i in 0..n {
        look(s, &format!("s{i}"), Priority::Settled, at);
    }
}

#[test]
fn while_a_reconcile_is_queued_settled_looks_keep_to_their_reserve() {
    let start = Instant::now();
    let due = start + Duration::from_secs(10);
    // 10 calls/s: a main bucket of 17 calls, a reserve of 3 (the client's burst of
    // 20 between them); a look costs 3.
    let mut free = schedule(10.0, start);
    settled(&mut free, 10, start);
    assert_eq!(free.grant(due).len(), 6, "both buckets: 5 + 1 looks");

    let mut held = schedule(10.0, start);
    settled(&mut held, 10, start);
    held.reconcile_queued(key("new"));
    assert_eq!(held.queue(due).queued_reconciles, 1);
    assert_eq!(held.grant(due).len(), 1, "the reserve's one look only");
    // Over the next 10 s the reserve pays for a quarter of the rate: 2.5 calls/s.
    let mut granted = 0;
    for tick in 1..=200 {
        let now = due + tick * 50 * MS;
        for look in held.grant(now) {
            // Reported back at once: the slots never limit these looks.
            held.polled(
                look.service,
                Product::Clb,
                1,
                outcome(Priority::Settled),
                now,
                now,
            );
            granted += 1;
        }
    }
    assert!((7..=9).contains(&granted), "{granted} looks at 2.5 calls/s");
    // Started: the main bucket (full by now) is theirs again.
    held.reconcile_started(&key("new"));
    let later = due + Duration::from_secs(10) + 50 * MS;
    assert!(held.grant(later).len() >= 2);
}

#[test]
fn while_a_reconcile_is_queued_looks_in_flight_hold_half_the_slots() {
    let start = Instant::now();
    // A budget large enough for every look (an account with raised quotas): only the
    // slots limit them.
    let pace = CloudPace {
        per_second: 1000.0,
        action_quotas: false,
    };
    let mut s = Schedule::new(500 * MS, Duration::from_secs(10), pace, 8, start);
    for i in 0..20 {
        look(&mut s, &format!("p{i}"), Priority::Pending, start);
    }
    s.reconcile_queued(key("new"));
    let first = s.grant(start + 500 * MS);
    assert_eq!(first.len(), 4, "half of 8 slots");
    assert!(s.grant(start + 550 * MS).is_empty(), "4 still in flight");
    // One reports back: one slot more.
    let back = first[0].service.clone();
    s.polled(
        back,
        Product::Clb,
        1,
        outcome(Priority::Settled),
        start + 600 * MS,
        start + 500 * MS,
    );
    assert_eq!(s.grant(start + 650 * MS).len(), 1);
    // Nothing queued: no cap.
    s.reconcile_started(&key("new"));
    assert_eq!(s.grant(start + 700 * MS).len(), 15);
}

#[test]
fn a_queued_reconcile_of_a_service_gone_holds_nothing_back() {
    let start = Instant::now();
    let mut s = schedule(10.0, start);
    settled(&mut s, 10, start);
    s.reconcile_queued(key("gone"));
    s.reconcile_queued(key("there"));
    s.drop_queued_unless(|service| service.name == "there");
    assert_eq!(s.queue(start).queued_reconciles, 1);
    s.forget(&key("there"));
    assert_eq!(s.queue(start).queued_reconciles, 0);
    assert_eq!(s.grant(start + Duration::from_secs(10)).len(), 6);
}

#[test]
fn a_lost_reconcile_is_granted_again_after_the_slow_interval() {
    let start = Instant::now();
    let mut s = one_pending(10.0, start);
    assert_eq!(s.grant(start + 500 * MS).len(), 1);
    assert!(s.grant(start + Duration::from_secs(10)).is_empty());
    assert_eq!(s.grant(start + 500 * MS + Duration::from_secs(10)).len(), 1);
}

#[test]
fn looks_go_pending_first_then_draining_then_settled_oldest_first_within_a_class() {
    let start = Instant::now();
    // A budget of 4 calls/s: 3 in the main bucket (burst 6), 1 reserved (burst 2).
    let mut s = schedule(4.0, start);
    let later = start + Duration::from_secs(30);
    // Other calls took half the main bucket: it holds one look.
    s.charge(Product::Clb, 3.0, later - MS);
    // Due times: the settled ones longest, so order is by class first.
    look(&mut s, "settled-old", Priority::Settled, start);
    look(
        &mut s,
        "draining",
        Priority::Draining,
        start + Duration::from_secs(5),
    );
    look(
        &mut s,
        "pending-new",
        Priority::Pending,
        start + Duration::from_secs(6),
    );
    look(
        &mut s,
        "pending-old",
        Priority::Pending,
        start + Duration::from_secs(4),
    );
    let grants = s.grant(later);
    let names: Vec<&str> = grants.iter().map(|g| g.service.name.as_str()).collect();
    // 3 calls a look: the main bucket (3) takes one pending look; the second does
    // not fit, so neither does the draining one; the reserve (2) serves the
    // settled one, which waits on its own quarter.
    assert_eq!(names, ["pending-old", "settled-old"]);
    let grants = s.grant(later + Duration::from_secs(1));
    let names: Vec<&str> = grants.iter().map(|g| g.service.name.as_str()).collect();
    assert_eq!(names, ["pending-new"]);
    let grants = s.grant(later + Duration::from_secs(2));
    let names: Vec<&str> = grants.iter().map(|g| g.service.name.as_str()).collect();
    assert_eq!(names, ["draining"]);
}

#[test]
fn with_no_settled_service_waiting_pending_ones_use_the_reserve_too() {
    let start = Instant::now();
    let mut s = schedule(4.0, start);
    for name in ["a", "b", "c"] {
        s.polled(
            key(name),
            Product::Clb,
            1,
            outcome(Priority::Pending),
            start,
            start,
        );
    }
    // Main: 6 tokens (two looks), reserve: 2 (one more, as dear as the whole burst).
    for name in ["d", "e"] {
        look(&mut s, name, Priority::Pending, start);
    }
    assert_eq!(s.grant(start + Duration::from_secs(1)).len(), 3);
}

#[test]
fn budgets_keep_each_look_action_inside_its_quota() {
    // NLB: a look per listener is 3 calls, one of them the health report (10/s, the
    // client at 9/s): looks at 0.9 of that, 8.1 health calls/s. CLB: its reads' 20/s.
    let (clb, nlb) = budgets(CloudPace::within_quotas(1000.0));
    assert!((nlb - 3.0 * 9.0 * 0.9).abs() < 1e-9, "{nlb}");
    assert!((clb - 3.0 * 18.0 * 0.9).abs() < 1e-9, "{clb}");
    // Under the caps, the rate is the budget; without action quotas, nothing caps it.
    assert_eq!(budgets(CloudPace::within_quotas(10.0)), (10.0, 10.0));
    let raised = CloudPace {
        per_second: 1000.0,
        action_quotas: false,
    };
    assert_eq!(budgets(raised), (1000.0, 1000.0));
}

#[test]
fn products_have_budgets_of_their_own() {
    let start = Instant::now();
    let mut s = schedule(4.0, start);
    look(&mut s, "clb-1", Priority::Pending, start);
    look(&mut s, "clb-2", Priority::Pending, start);
    look(&mut s, "clb-3", Priority::Pending, start);
    s.polled(
        key("nlb"),
        Product::Nlb,
        1,
        outcome(Priority::Pending),
        start,
        start,
    );
    let grants = s.grant(start + Duration::from_secs(1));
    assert!(grants.iter().any(|g| g.service == key("nlb")), "{grants:?}");
}

#[test]
fn a_look_dearer_than_the_burst_still_goes_and_its_debt_keeps_the_rate() {
    let start = Instant::now();
    let mut s = schedule(4.0, start);
    s.polled(
        key("wide"),
        Product::Clb,
        10,
        outcome(Priority::Pending),
        start,
        start,
    );
    let mut spent = 0;
    let mut t = start;
    while t < start + Duration::from_secs(60) {
        t += 50 * MS;
        for g in s.grant(t) {
            assert_eq!(g.calls, 30);
            spent += g.calls;
            s.polled(
                g.service,
                Product::Clb,
                10,
                outcome(Priority::Pending),
                t,
                t,
            );
        }
    }
    // 4 calls/s for 60 s, plus both buckets' bursts and one look's debt.
    assert!(spent >= 4 * 30, "{spent}");
    assert!(spent <= 4 * 60 + 3 + 2 + 30, "{spent}");
}

#[test]
fn throttling_slows_the_product_and_keeps_the_order() {
    let start = Instant::now();
    let mut s = schedule(8.0, start);
    look(&mut s, "first", Priority::Pending, start);
    look(&mut s, "second", Priority::Pending, start + MS);
    let now = start + Duration::from_secs(1);
    assert_eq!(s.grant(now).len(), 2);
    // The first one's reconcile is throttled: it keeps its due time.
    s.throttled_look(&key("first"), Product::Clb, now);
    look(&mut s, "second", Priority::Pending, now);
    // Nothing goes at once, then the first goes before the second.
    assert!(s.grant(now + 10 * MS).is_empty());
    let mut order = vec![];
    let mut t = now;
    while order.len() < 2 && t < now + Duration::from_secs(20) {
        t += 50 * MS;
        for g in s.grant(t) {
            order.push((g.service.name.clone(), t));
        }
    }
    assert_eq!(order[0].0, "first", "{order:?}");
    // Half the rate (3 calls/s on main): the first look waits 2 calls' worth,
    // where the full rate would have taken a third of a second.
    assert!(order[0].1 >= now + 500 * MS, "{order:?}");
}

/// Calls paid for a look (charged), and calls the client made outside a grant (a
/// load balancer being made, a write, a job poll, a retry: no grant paid for them,
/// the client's count says they were made), delay pending looks alike, and leave
/// the reserve to the settled ones.
#[test]
fn calls_outside_a_grant_delay_pending_looks_and_leave_the_reserve_to_settled_ones() {
    // How the 9 calls are spent.
    type Spend = fn(&mut Schedule, Instant);
    let cases: [(&str, Spend); 2] = [
        ("charged", |s, at| s.charge(Product::Clb, 9.0, at)),
        ("made outside a grant", |s, at| {
            s.calls_made(Product::Clb, 9.0, at)
        }),
    ];
    let names = |grants: Vec<Grant>| -> Vec<String> {
        grants.into_iter().map(|g| g.service.name).collect()
    };
    for (what, spend) in cases {
        let start = Instant::now();
        // 4 calls/s: main 3 calls/s (burst 6), reserve 1 call/s (burst 2).
        let mut s = schedule(4.0, start);
        look(&mut s, "s0", Priority::Settled, start);
        look(&mut s, "p", Priority::Pending, start + 9500 * MS);
        let at = start + Duration::from_secs(10);
        // Main 6 - 9 = -3; the reserve keeps its 2.
        spend(&mut s, at - MS);
        assert_eq!(
            names(s.grant(at)),
            ["s0"],
            "{what}: the reserve's settled look"
        );
        // Main -3 + 4.5; the reserve (free now, -1 + 1.5) cannot pay either.
        assert!(s.grant(at + 1500 * MS).is_empty(), "{what}");
        assert_eq!(
            names(s.grant(at + 2050 * MS)),
            ["p"],
            "{what}: main's, after 2 s"
        );
    }
}

/// After a burst of writes (a Service's 500 backends added: 25 calls), a pending
/// Service is looked at as often as the client's own bucket (`--cloud-rate-limit`
/// 10/s, bursts of 20) could make the looks without waiting: the scheduler's buckets
/// hold together what the client's holds. With a second's worth in them (11 calls),
/// it looked twice in the 3 s after the adds where the client could have 4 times.
#[test]
fn after_a_burst_of_writes_a_pending_service_is_looked_at_as_often_as_the_client_allows() {
    use alibaba_lb::{RateLimit, Tokens};
    let start = Instant::now();
    let window = Duration::from_secs(3);
    let tick = 50 * MS;
    let fast = 500 * MS;

    // The client alone: its first look and the adds at `start`, then a look whenever
    // one is due and its bucket holds the calls.
    let client = RateLimit {
        per_second: 10.0,
        burst: 20,
    };
    let mut bucket = Tokens::full(client, start);
    bucket.charge(client, 3.0 + 25.0, start);
    let (mut client_looks, mut last, mut t) = (0, start, start);
    while t < start + window {
        t += tick;
        if t >= last + fast && bucket.try_take(client, 3.0, t) {
            client_looks += 1;
            last = t;
        }
    }

    // The scheduler: the same first look, the same adds seen in the client's count.
    let mut s = schedule(10.0, start);
    look(&mut s, "p", Priority::Pending, start - fast);
    assert_eq!(s.grant(start).len(), 1);
    look(&mut s, "p", Priority::Pending, start);
    s.calls_made(Product::Clb, 3.0 + 25.0, start);
    let (mut looks, mut t) = (0, start);
    while t < start + window {
        t += tick;
        for g in s.grant(t) {
            looks += 1;
            s.calls_made(Product::Clb, 3.0, t);
            look(&mut s, &g.service.name, Priority::Pending, t);
        }
    }
    assert!(client_looks >= 4, "{client_looks}");
    assert!(
        looks >= client_looks,
        "{looks} looks in {window:?} after the adds; the client could make {client_looks}"
    );
}

#[test]
fn a_granted_looks_own_calls_are_not_paid_twice() {
    // One pending Service at 4 calls/s: a look (3 calls) every 500 ms would take
    // more than the budget, which allows one every 750 ms; paying its calls again
    // would halve that pace.
    let start = Instant::now();
    let looks = |report: bool| {
        let mut s = one_pending(4.0, start);
        let (mut at, mut made, mut t) = (vec![], 0.0, start);
        while t < start + Duration::from_secs(20) {
            t += 50 * MS;
            // The tick reads the client's count first (the look's calls, made
            // before its reconcile reported back), then grants.
            if report {
                s.calls_made(Product::Clb, made, t);
                made = 0.0;
            }
            for g in s.grant(t) {
                at.push(t);
                made += f64::from(g.calls);
                s.polled(g.service, Product::Clb, 1, outcome(Priority::Pending), t, t);
            }
        }
        at
    };
    let counted = looks(true);
    assert_eq!(counted, looks(false));
    assert!(counted.len() >= 25, "{} looks in 20 s", counted.len());
}

#[test]
fn an_advance_is_not_kept_past_the_look_it_paid_for() {
    let start = Instant::now();
    let mut s = one_pending(4.0, start);
    let t1 = start + Duration::from_secs(1);
    assert_eq!(s.grant(t1).len(), 1);
    // Its reconcile failed before calling the cloud, and reported back.
    look(&mut s, "p", Priority::Pending, t1);
    s.calls_made(Product::Clb, 0.0, t1);
    // Six calls of something else: none of them is the look's, all are paid by the
    // main bucket (had the advance absorbed the look's three, it would hold -3).
    s.calls_made(Product::Clb, 6.0, t1 + MS);
    // The main bucket held 6 (the client's burst of 8, less the reserve's 2), the look
    // took 3 of them.
    let main = s.budget(Product::Clb).main.level;
    assert!((-3.0..-2.9).contains(&main), "main bucket at {main}");
}

#[test]
fn a_settled_look_paid_from_the_reserve_is_not_held_back_by_the_slots() {
    let start = Instant::now();
    // A main budget large enough for every pending look: only the slots hold them.
    let mut s = schedule(1000.0, start);
    settled(&mut s, 1, start);
    for i in 0..20 {
        look(
            &mut s,
            &format!("p{i}"),
            Priority::Pending,
            start + Duration::from_secs(9),
        );
    }
    s.reconcile_queued(key("new"));
    let at = start + Duration::from_secs(10);
    let grants = s.grant(at);
    let settled_granted = grants
        .iter()
        .filter(|g| g.priority == Priority::Settled)
        .count();
    assert_eq!(
        grants.len(),
        5,
        "half of 8 slots for pending looks, and the settled one"
    );
    assert_eq!(settled_granted, 1);
}

#[test]
fn the_queue_shows_waiting_looks_by_class_and_the_oldest_wait() {
    let start = Instant::now();
    let mut s = one_pending(10.0, start);
    look(&mut s, "s", Priority::Settled, start);
    let state = s.queue(start + Duration::from_secs(12));
    assert_eq!(state.waiting, [1, 0, 1]);
    assert_eq!(state.oldest_wait, Duration::from_millis(11_500));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Whatever the mix, over a long run: calls granted stay within the budget
    /// (its bursts plus its rate), every settled Service is looked at within the
    /// stated bound (so none starves), even while writes take up to the whole
    /// budget and a reconcile waits for its slot all along.
    #[test]
    fn the_schedule_keeps_its_budget_and_its_bounds(
        services in proptest::collection::vec((0u8..3, any::<bool>(), 1usize..4), 1..40),
        rate in 2.0f64..20.0,
        writes in 0.0f64..1.0,
        reconcile_waiting in any::<bool>(),
    ) {
        let fast = 500 * MS;
        let slow = Duration::from_secs(10);
        let start = Instant::now();
        let mut s = Schedule::new(fast, slow, CloudPace::within_quotas(rate), 8, start);
        if reconcile_waiting {
            s.reconcile_queued(key("waiting"));
        }
        let (clb_rate, nlb_rate) = budgets(CloudPace::within_quotas(rate));
        let mut last_look: HashMap<String, Instant> = HashMap::new();
        let mut settled_calls = [0.0f64; 2];
        for (i, (class, nlb, listeners)) in services.iter().enumerate() {
            let product = if *nlb { Product::Nlb } else { Product::Clb };
            let priority = Priority::ALL[*class as usize];
            s.polled(key(&format!("s{i}")), product, *listeners, outcome(priority), start, start);
            last_look.insert(format!("s{i}"), start);
            if priority == Priority::Settled {
                settled_calls[product_index(product)] += look_cost(*listeners);
            }
        }
        let mut spent = [0.0f64; 2];
        let mut made = [0.0f64; 2];
        let step = 50 * MS;
        let run = Duration::from_secs(120);
        let mut t = start;
        let mut worst_gap: HashMap<String, Duration> = HashMap::new();
        while t < start + run {
            t += step;
            // The client's count: the granted looks' calls, and writes and load
            // balancers being made (calls outside any grant).
            for (i, (product, per_second)) in
                [(Product::Clb, clb_rate), (Product::Nlb, nlb_rate)].into_iter().enumerate()
            {
                let outside = per_second * writes * step.as_secs_f64();
                s.calls_made(product, made[i] + outside, t);
                made[i] = 0.0;
            }
            for g in s.grant(t) {
                let i: usize = g.service.name[1..].parse().unwrap();
                let (class, nlb, listeners) = services[i];
                let product = if nlb { Product::Nlb } else { Product::Clb };
                spent[product_index(product)] += g.calls as f64;
                made[product_index(product)] += g.calls as f64;
                let priority = Priority::ALL[class as usize];
                let gap = t.duration_since(last_look[&g.service.name]);
                let worst = worst_gap.entry(g.service.name.clone()).or_default();
                *worst = (*worst).max(gap);
                last_look.insert(g.service.name.clone(), t);
                // Reported back at once, in the same class.
                s.polled(g.service.clone(), product, listeners, outcome(priority), t, t);
            }
        }
        let secs = run.as_secs_f64();
        for (i, per_second) in [clb_rate, nlb_rate].into_iter().enumerate() {
            // The rate, both buckets' bursts (together the client's own burst of two
            // seconds of `rate`, or a second of each bucket's share if that is more),
            // and one dear look's debt per bucket.
            let second = (per_second * 0.75).ceil().max(2.0) + (per_second * 0.25).ceil().max(2.0);
            let bursts = (rate * 2.0).ceil().max(second);
            let allowed = per_second * secs + bursts + 12.0;
            prop_assert!(spent[i] <= allowed, "product {i}: {} > {allowed}", spent[i]);
        }
        // The stated bound: slow + the settled looks' calls over the reserved
        // quarter, plus a debt (a look and a burst) and a second of ticks.
        for (i, (class, nlb, _)) in services.iter().enumerate() {
            if Priority::ALL[*class as usize] != Priority::Settled {
                continue;
            }
            let p = usize::from(*nlb);
            let per_second = [clb_rate, nlb_rate][p];
            let bound = slow.as_secs_f64() + (settled_calls[p] + 8.0) / (per_second * SETTLED_SHARE) + 1.0;
            if bound < secs / 2.0 {
                let name = format!("s{i}");
                prop_assert!(last_look[&name] > start, "{name} never looked at (bound {bound})");
                prop_assert!(worst_gap[&name].as_secs_f64() <= bound, "{name}: {:?} > {bound}", worst_gap[&name]);
            }
        }
    }
}
