//! The AdvancedRollingUpdate controls that choose nodes: `rollgate.io/partition` (keep
//! some nodes on the old revision) and `rollgate.io/node-selector` (upgrade only the
//! nodes that match). This file owns their parsing and the pure choice of the nodes they
//! hold back; `rolling_plan` leaves those nodes' old pods alone and counts everything
//! else as before (the budget is never bypassed). `rollgate.io/paused` needs no choice
//! of nodes and lives in `policy` and `RollingPlan::paused`.
//!
//! Which nodes a partition keeps (stable and predictable, so an operator can name them
//! before the rollout):
//! - The partition counts the DaemonSet's nodes that are still on an old revision: a
//!   node with a live out-of-date pod, Ready or NotReady, in the percentage base (nodes
//!   left out for placement and pods on missing Node objects are not counted).
//! - Nodes the node selector does not match are old and stay old: they count toward
//!   the partition first (as in Kruise's Advanced DaemonSet, whose partition counts all
//!   of its nodes).
//! - The rest of the partition is kept among the old nodes the selector admits (all of
//!   them without a selector): those whose names sort first. The others are upgraded in
//!   the planner's usual order (ascending names), within the budget.
//! - So the kept set does not reshuffle while the rollout runs: upgrading a node removes
//!   it from the old ones but never from the kept prefix, and a node that joins gets a
//!   pod of the current revision and is not old. It moves only when a kept node leaves,
//!   the partition or selector changes, or a new template makes every node old again
//!   (then the same first names are kept).
//! - A percentage is of the percentage base (`Progress::total_nodes`, the same base as
//!   `max-unavailable`) and rounds up, so a partition never upgrades more nodes than
//!   asked. As Kruise does for CloneSet percentages (its docs, v1.2), a percentage below
//!   100% on more than one node keeps at most all nodes but one, so `90%` of 5 nodes
//!   still upgrades one node. An integer above the node count keeps every node.

use std::collections::BTreeMap;

use kube::core::{Expression, Selector, SelectorExt};

use super::int_or_percent::{int_or_percent_enum, IntOrPercent, NotIntOrPercent};
use crate::object::NodeFacts;

/// What `rollgate.io/partition` accepts, for error messages and docs.
pub const PARTITION_ACCEPTED_FORMS: &str = "a non-negative integer (e.g. 3) or a whole \
     percentage from 0% to 100% (e.g. 10%) of the DaemonSet's nodes to keep on the old \
     revision; 0 and 0% keep none";

/// What `rollgate.io/node-selector` accepts, for error messages and docs.
pub const NODE_SELECTOR_ACCEPTED_FORMS: &str = "a label selector as for kubectl -l: \
     requirements joined by commas, all of which must match, each one of key=value, \
     key==value, key!=value, key in (v1,v2), key notin (v1,v2), key (exists) or !key \
     (does not exist)";

/// How many nodes to keep on the old revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partition {
    Count(u32),
    /// 1 to 100.
    Percent(u8),
}

impl Partition {
    /// Parses the annotation value. `Ok(None)` for `0` and `0%`: no partition.
    pub fn parse(raw: &str) -> Result<Option<Partition>, NotAPartition> {
        Ok(IntOrPercent::parse(raw)
            .map_err(|NotIntOrPercent| NotAPartition)?
            .map(Partition::from))
    }

    /// The number of nodes to keep old, given the percentage base. Percentages round up,
    /// but below 100% leave at least one of two or more nodes to upgrade.
    pub fn kept(self, base_nodes: usize) -> usize {
        match self {
            Partition::Count(count) => (count as usize).min(base_nodes),
            Partition::Percent(100) => base_nodes,
            Partition::Percent(percent) => {
                let up = (base_nodes * percent as usize).div_ceil(100);
                if base_nodes > 1 {
                    up.min(base_nodes - 1)
                } else {
                    up
                }
            }
        }
    }
}

/// A `rollgate.io/partition` value that is not one of `PARTITION_ACCEPTED_FORMS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotAPartition;

int_or_percent_enum!(Partition);

/// A parsed `rollgate.io/node-selector`, with the text it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSelector {
    text: String,
    selector: Selector,
}

impl NodeSelector {
    /// Parses kubectl's `-l` syntax (set-based and equality requirements). An empty
    /// value is refused: it would select every node, which removing the annotation says
    /// more plainly. On error, says what is wrong.
    pub fn parse(raw: &str) -> Result<NodeSelector, String> {
        let expressions = parse_selector(raw)?;
        Ok(NodeSelector {
            text: raw.trim().to_string(),
            selector: expressions.into_iter().collect(),
        })
    }

    pub fn matches(&self, node: &impl NodeFacts) -> bool {
        static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();
        self.selector
            .matches(node.metadata().labels.as_ref().unwrap_or(&NO_LABELS))
    }
}

impl std::fmt::Display for NodeSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// The nodes a partition and a node selector hold on the old revision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeldBack {
    /// The partition resolved against the base, when one is set.
    pub partition: Option<usize>,
    /// Old nodes the partition keeps, by name.
    pub kept_by_partition: Vec<String>,
    /// Old nodes the node selector does not match, by name.
    pub held_by_selector: Vec<String>,
}

impl HeldBack {
    /// Chooses the held-back nodes among `old`, the DaemonSet's nodes still on an old
    /// revision, in ascending name order (see the rules at the top of this file).
    pub fn choose<N: NodeFacts>(
        partition: Option<Partition>,
        selector: Option<&NodeSelector>,
        old: &[(&str, &N)],
        base_nodes: usize,
    ) -> HeldBack {
        let (mut admitted, mut held_by_selector) = (Vec::new(), Vec::new());
        for &(name, node) in old {
            if selector.is_none_or(|s| s.matches(node)) {
                admitted.push(name.to_string());
            } else {
                held_by_selector.push(name.to_string());
            }
        }
        let partition = partition.map(|p| p.kept(base_nodes));
        let keep = partition
            .unwrap_or(0)
            .saturating_sub(held_by_selector.len())
            .min(admitted.len());
        admitted.truncate(keep);
        HeldBack {
            partition,
            kept_by_partition: admitted,
            held_by_selector,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.kept_by_partition.is_empty() && self.held_by_selector.is_empty()
    }

    /// Whether this node's old pod must stay.
    pub fn holds(&self, node: &str) -> bool {
        // Both lists are in name order.
        self.kept_by_partition
            .binary_search_by(|n| n.as_str().cmp(node))
            .is_ok()
            || self
                .held_by_selector
                .binary_search_by(|n| n.as_str().cmp(node))
                .is_ok()
    }
}

/// A token of the selector syntax.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// A key, a value, or the words `in` / `notin`.
    Word(String),
    Bang,
    Equals,
    DoubleEquals,
    NotEquals,
    Open,
    Close,
    Comma,
}

fn tokens(raw: &str) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {}
            '(' => out.push(Token::Open),
            ')' => out.push(Token::Close),
            ',' => out.push(Token::Comma),
            '=' if chars.peek() == Some(&'=') => {
                chars.next();
                out.push(Token::DoubleEquals);
            }
            '=' => out.push(Token::Equals),
            '!' if chars.peek() == Some(&'=') => {
                chars.next();
                out.push(Token::NotEquals);
            }
            '!' => out.push(Token::Bang),
            c if is_word_char(c) => {
                let mut word = String::from(c);
                while let Some(&next) = chars.peek().filter(|n| is_word_char(**n)) {
                    word.push(next);
                    chars.next();
                }
                out.push(Token::Word(word));
            }
            other => return Err(format!("unexpected character {other:?}")),
        }
    }
    Ok(out)
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')
}

fn parse_selector(raw: &str) -> Result<Vec<Expression>, String> {
    let tokens = tokens(raw)?;
    if tokens.is_empty() {
        return Err("it is empty (remove the annotation to upgrade every node)".into());
    }
    let mut at = 0;
    let mut expressions = Vec::new();
    loop {
        expressions.push(requirement(&tokens, &mut at)?);
        match tokens.get(at) {
            None => return Ok(expressions),
            Some(Token::Comma) => at += 1,
            Some(other) => return Err(format!("expected a comma, found {}", shown(other))),
        }
    }
}

fn shown(token: &Token) -> String {
    match token {
        Token::Word(w) => format!("{w:?}"),
        Token::Bang => "'!'".into(),
        Token::Equals => "'='".into(),
        Token::DoubleEquals => "'=='".into(),
        Token::NotEquals => "'!='".into(),
        Token::Open => "'('".into(),
        Token::Close => "')'".into(),
        Token::Comma => "','".into(),
    }
}

/// One requirement starting at `tokens[*at]`; leaves `at` after it.
fn requirement(tokens: &[Token], at: &mut usize) -> Result<Expression, String> {
    let mut next = || {
        let token = tokens.get(*at);
        *at += 1;
        token
    };
    match next() {
        Some(Token::Bang) => match next() {
            Some(Token::Word(key)) => Ok(Expression::DoesNotExist(label_key(key)?)),
            _ => Err("expected a label key after '!'".into()),
        },
        Some(Token::Word(key)) => {
            let key = label_key(key)?;
            let op = tokens.get(*at);
            match op {
                None | Some(Token::Comma) => Ok(Expression::Exists(key)),
                Some(Token::Equals | Token::DoubleEquals | Token::NotEquals) => {
                    *at += 1;
                    // `key=` matches an empty value, as in Kubernetes.
                    let value = match tokens.get(*at) {
                        Some(Token::Word(v)) => {
                            *at += 1;
                            label_value(v)?
                        }
                        None | Some(Token::Comma) => String::new(),
                        Some(other) => {
                            return Err(format!("expected a value, found {}", shown(other)))
                        }
                    };
                    Ok(if op == Some(&Token::NotEquals) {
                        Expression::NotEqual(key, value)
                    } else {
                        Expression::Equal(key, value)
                    })
                }
                Some(Token::Word(word)) if word == "in" || word == "notin" => {
                    *at += 1;
                    let values = value_set(tokens, at)?;
                    Ok(if word == "in" {
                        Expression::In(key, values)
                    } else {
                        Expression::NotIn(key, values)
                    })
                }
                Some(other) => Err(format!(
                    "expected =, ==, !=, in or notin after {key:?}, found {}",
                    shown(other)
                )),
            }
        }
        Some(other) => Err(format!("expected a label key, found {}", shown(other))),
        None => Err("expected a label key at the end".into()),
    }
}

/// `( v1, v2 )`, at least one value.
fn value_set(
    tokens: &[Token],
    at: &mut usize,
) -> Result<std::collections::BTreeSet<String>, String> {
    if tokens.get(*at) != Some(&Token::Open) {
        return Err("expected '(' after in or notin".into());
    }
    *at += 1;
    let mut values = std::collections::BTreeSet::new();
    loop {
        match tokens.get(*at) {
            Some(Token::Word(v)) => {
                values.insert(label_value(v)?);
                *at += 1;
            }
            _ => return Err("expected a value in the parenthesized list".into()),
        }
        match tokens.get(*at) {
            Some(Token::Comma) => *at += 1,
            Some(Token::Close) => {
                *at += 1;
                return Ok(values);
            }
            _ => return Err("expected ',' or ')' in the parenthesized list".into()),
        }
    }
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63
/// characters that starts and ends alphanumeric.
fn label_key(key: &str) -> Result<String, String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && !p.contains('/')
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            })
    });
    if !prefix_ok || !is_label_name(name) {
        return Err(format!("{key:?} is not a valid label key"));
    }
    Ok(key.to_string())
}

fn label_value(value: &str) -> Result<String, String> {
    if value.is_empty() || is_label_name(value) {
        Ok(value.to_string())
    } else {
        Err(format!("{value:?} is not a valid label value"))
    }
}

/// At most 63 characters of `[A-Za-z0-9-_.]`, starting and ending alphanumeric.
fn is_label_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::labelled_node as labelled;
    use k8s_openapi::api::core::v1::Node;

    #[test]
    fn partition_accepted_forms() {
        let cases: &[(&str, Result<Option<Partition>, NotAPartition>)] = &[
            ("3", Ok(Some(Partition::Count(3)))),
            (" 3 ", Ok(Some(Partition::Count(3)))),
            ("0", Ok(None)),
            ("0%", Ok(None)),
            ("10%", Ok(Some(Partition::Percent(10)))),
            ("100%", Ok(Some(Partition::Percent(100)))),
            ("99999999999", Ok(Some(Partition::Count(u32::MAX)))),
            ("101%", Err(NotAPartition)),
            ("-1", Err(NotAPartition)),
            ("1.5", Err(NotAPartition)),
            ("", Err(NotAPartition)),
            ("%", Err(NotAPartition)),
            ("three", Err(NotAPartition)),
            ("3 %", Err(NotAPartition)),
        ];
        for (raw, expected) in cases {
            assert_eq!(&Partition::parse(raw), expected, "{raw:?}");
        }
    }

    #[test]
    fn partition_percentages_round_up_but_leave_one_node_to_upgrade() {
        // (partition, base nodes, kept)
        let cases = [
            (Partition::Percent(10), 4, 1),
            (Partition::Percent(50), 5, 3),
            (Partition::Percent(90), 5, 4),
            (Partition::Percent(99), 2, 1),
            (Partition::Percent(100), 5, 5),
            (Partition::Percent(50), 1, 1),
            (Partition::Percent(50), 0, 0),
            (Partition::Count(3), 5, 3),
            (Partition::Count(9), 5, 5),
        ];
        for (p, base, kept) in cases {
            assert_eq!(p.kept(base), kept, "{p} of {base}");
        }
    }

    #[test]
    fn selector_accepted_forms_match_as_kubernetes_does() {
        let a = labelled("a", &[("pool", "a"), ("zone", "z1"), ("gpu", "")]);
        let b = labelled("b", &[("pool", "b")]);
        let none = labelled("c", &[]);
        // (selector, matches a, matches b, matches the unlabelled node)
        let cases = [
            ("pool=a", true, false, false),
            ("pool==a", true, false, false),
            ("pool!=a", false, true, true),
            ("pool in (a,b)", true, true, false),
            ("pool in ( a , b )", true, true, false),
            ("pool notin (a)", false, true, true),
            ("pool", true, true, false),
            ("!pool", false, false, true),
            ("pool=a,zone=z1", true, false, false),
            ("pool in (a,b), !zone", false, true, false),
            ("gpu=", true, false, false),
            ("apps.openyurt.io/nodepool", false, false, false),
            ("apps.openyurt.io/nodepool!=hangzhou", true, true, true),
        ];
        for (text, on_a, on_b, on_none) in cases {
            let s = NodeSelector::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(
                (s.matches(&a), s.matches(&b), s.matches(&none)),
                (on_a, on_b, on_none),
                "{text:?}"
            );
            assert_eq!(s.to_string(), text.trim());
        }
    }

    #[test]
    fn bad_selectors_say_what_is_wrong() {
        for (text, says) in [
            ("", "empty"),
            ("  ", "empty"),
            ("pool=a,", "label key at the end"),
            ("pool in a", "expected '('"),
            ("pool in ()", "value in the parenthesized list"),
            ("pool in (a", "',' or ')'"),
            ("pool>3", "unexpected character"),
            ("pool=a b", "expected a comma"),
            ("=a", "expected a label key"),
            ("!", "label key after '!'"),
            ("-pool=a", "not a valid label key"),
            ("Example.com/pool=a", "not a valid label key"),
            ("pool=-a", "not a valid label value"),
            ("pool exists", "expected =, ==, !=, in or notin"),
        ] {
            let error = NodeSelector::parse(text).expect_err(text);
            assert!(error.contains(says), "{text:?}: {error}");
        }
    }

    fn names(nodes: &[Node]) -> Vec<(&str, &Node)> {
        nodes
            .iter()
            .map(|n| (n.metadata.name.as_deref().unwrap(), n))
            .collect()
    }

    #[test]
    fn the_partition_keeps_the_first_old_names_and_selector_holds_count_first() {
        let nodes: Vec<Node> = ["n1", "n2", "n3", "n4", "n5"]
            .iter()
            .enumerate()
            .map(|(i, n)| labelled(n, &[("pool", if i < 2 { "a" } else { "b" })]))
            .collect();
        let old = names(&nodes);
        let pool_b = NodeSelector::parse("pool=b").unwrap();
        let s = |v: &[&str]| v.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        // (partition, selector, old nodes, kept, held by the selector)
        type Case<'a> = (
            Option<Partition>,
            Option<&'a NodeSelector>,
            &'a [(&'a str, &'a Node)],
            &'a [&'a str],
            &'a [&'a str],
        );
        let cases: &[Case] = &[
            (Some(Partition::Count(2)), None, &old, &["n1", "n2"], &[]),
            (
                Some(Partition::Count(2)),
                None,
                &old[2..],
                &["n3", "n4"],
                &[],
            ),
            (
                Some(Partition::Count(9)),
                None,
                &old,
                &["n1", "n2", "n3", "n4", "n5"],
                &[],
            ),
            (Some(Partition::Percent(40)), None, &old, &["n1", "n2"], &[]),
            (None, Some(&pool_b), &old, &[], &["n1", "n2"]),
            // The two pool-a nodes are the partition already.
            (
                Some(Partition::Count(2)),
                Some(&pool_b),
                &old,
                &[],
                &["n1", "n2"],
            ),
            (
                Some(Partition::Count(3)),
                Some(&pool_b),
                &old,
                &["n3"],
                &["n1", "n2"],
            ),
            // Fewer old nodes than the partition: all kept.
            (
                Some(Partition::Count(3)),
                None,
                &old[3..],
                &["n4", "n5"],
                &[],
            ),
            (None, None, &old, &[], &[]),
        ];
        for (i, (partition, selector, old, kept, held)) in cases.iter().enumerate() {
            let h = HeldBack::choose(*partition, *selector, old, 5);
            assert_eq!(
                (&h.kept_by_partition, &h.held_by_selector),
                (&s(kept), &s(held)),
                "case {i}"
            );
            for (name, _) in old.iter() {
                assert_eq!(
                    h.holds(name),
                    kept.contains(name) || held.contains(name),
                    "case {i}: {name}"
                );
            }
        }
    }
}
