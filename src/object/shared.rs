//! Values many cached pods hold alike, kept once per process: [`Shared`].
//!
//! Pods of one workload revision carry the same containers, owner, readiness gates and
//! service account; the pods on one node the same node name; most conditions the same
//! type, status and reason. A `Shared` value is looked up in a process-wide pool of its
//! type when it is made, so equal values are one allocation however many pods hold
//! them, and a pod pays one pointer for each (issue 46: at 200,000 pods that was most of
//! a pod's memory besides its metadata).
//!
//! A pool keeps each value until no pod holds it any more and the pool has since doubled:
//! then it sweeps the values only the pool holds. So the pool never holds more than about
//! twice what pods share, without a timer and without a lock on every drop.
//!
//! Why not a crate: none is in the dependency tree, and the usual interners keep what
//! they intern forever (node names and images come and go) or intern strings only,
//! where here whole container lists are shared. This one is a `HashSet` of `Arc`s
//! behind a mutex, taken once per converted value; pods are converted on the one task
//! that drains the pod watch, so the mutex is not contended.
use std::collections::HashSet;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A value of which one copy per process is kept: equal values made anywhere share one
/// allocation. Read it through `Deref`. `DerefMut` (for tests and simulations that edit
/// a cached pod) gives the holder a copy of its own, outside the pool.
pub struct Shared<T: Intern>(Arc<T>);

/// A string kept once per process (node names, condition types, statuses and reasons).
pub type Atom = Shared<Box<str>>;

/// A type with a pool of its own. Implement with `intern!`.
pub trait Intern: Hash + Eq + Sized + Send + Sync + 'static {
    fn pool() -> &'static Pool<Self>;
}

/// Declares the pool of a type: `intern!(Box<[Thing]>);` makes `Shared<Box<[Thing]>>`.
macro_rules! intern {
    ($($ty:ty),* $(,)?) => {$(
        impl $crate::object::shared::Intern for $ty {
            fn pool() -> &'static $crate::object::shared::Pool<Self> {
                static POOL: $crate::object::shared::Pool<$ty> =
                    $crate::object::shared::Pool::new();
                &POOL
            }
        }
    )*};
}
pub(crate) use intern;

intern!(Box<str>, Box<[Box<str>]>);

/// The values of one type that some holder shares (see the module doc for its sweep).
pub struct Pool<T>(Mutex<Values<T>>);

struct Values<T> {
    set: Option<HashSet<Arc<T>>>,
    /// Sweep before the set grows past this size.
    sweep_at: usize,
}

/// Below this size a pool is not swept: a few dozen dead values cost less than a sweep.
const SMALLEST_SWEEP: usize = 64;

impl<T: Intern> Pool<T> {
    pub const fn new() -> Self {
        Pool(Mutex::new(Values {
            set: None,
            sweep_at: SMALLEST_SWEEP,
        }))
    }

    fn share(&self, value: T) -> Arc<T> {
        // A panic while the lock was held left the set whole (no user code runs under
        // it but `Hash` and `Eq`), so a poisoned pool is still a good one.
        let mut values = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let Values { set, sweep_at } = &mut *values;
        let set = set.get_or_insert_with(HashSet::new);
        if let Some(shared) = set.get(&value) {
            return shared.clone();
        }
        if set.len() >= *sweep_at {
            // Only the pool holds it: no holder can reach it again but through the
            // pool, and the pool is locked.
            set.retain(|shared| Arc::strong_count(shared) > 1);
            *sweep_at = (2 * set.len()).max(SMALLEST_SWEEP);
            if set.capacity() > 4 * *sweep_at {
                set.shrink_to(*sweep_at);
            }
        }
        let shared = Arc::new(value);
        set.insert(shared.clone());
        shared
    }

    /// Values in the pool, live or awaiting the next sweep.
    pub fn len(&self) -> usize {
        let values = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        values.set.as_ref().map_or(0, HashSet::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: Intern> Default for Pool<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Intern> Shared<T> {
    /// The pool's copy of `value` (`value` itself when it is the first).
    pub fn new(value: T) -> Self {
        Shared(T::pool().share(value))
    }

    /// Whether both are the one copy (equal values made through the pool always are).
    pub fn ptr_eq(a: &Self, b: &Self) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl Atom {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<T: Intern> Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: Intern + Clone> DerefMut for Shared<T> {
    fn deref_mut(&mut self) -> &mut T {
        Arc::make_mut(&mut self.0)
    }
}

impl<T: Intern> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<T: Intern + fmt::Debug> fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<T: Intern> PartialEq for Shared<T> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl<T: Intern> Eq for Shared<T> {}

impl<T: Intern> Hash for Shared<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state)
    }
}

impl<T: Intern + Default> Default for Shared<T> {
    fn default() -> Self {
        Shared::new(T::default())
    }
}

impl<T: Intern + Serialize> Serialize for Shared<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de, T: Intern + Deserialize<'de>> Deserialize<'de> for Shared<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(deserializer).map(Shared::new)
    }
}

impl<T: Intern> From<T> for Shared<T> {
    fn from(value: T) -> Self {
        Shared::new(value)
    }
}

impl From<&str> for Atom {
    fn from(value: &str) -> Self {
        Shared::new(value.into())
    }
}

impl From<String> for Atom {
    fn from(value: String) -> Self {
        Shared::new(value.into_boxed_str())
    }
}

impl fmt::Display for Atom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for Atom {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Atom {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Atom {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl<T, const N: usize> From<[T; N]> for Shared<Box<[T]>>
where
    Box<[T]>: Intern,
{
    fn from(values: [T; N]) -> Self {
        Shared::new(Box::new(values))
    }
}

impl<T> From<Vec<T>> for Shared<Box<[T]>>
where
    Box<[T]>: Intern,
{
    fn from(values: Vec<T>) -> Self {
        Shared::new(values.into_boxed_slice())
    }
}

impl<T> FromIterator<T> for Shared<Box<[T]>>
where
    Box<[T]>: Intern,
{
    fn from_iter<I: IntoIterator<Item = T>>(values: I) -> Self {
        Shared::new(values.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_are_one_allocation() {
        let a = Atom::from("shared-tests-node-1");
        let b = Atom::from(String::from("shared-tests-node-1"));
        let c = Atom::from("shared-tests-node-2");
        assert!(Shared::ptr_eq(&a, &b));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a, "shared-tests-node-1");
        assert_eq!(a.as_str(), "shared-tests-node-1");
        let list: Shared<Box<[Box<str>]>> = ["shared-tests-x".into()].into();
        let same: Shared<Box<[Box<str>]>> = vec!["shared-tests-x".into()].into();
        assert!(Shared::ptr_eq(&list, &same));
    }

    #[test]
    fn an_edit_makes_a_copy_of_ones_own() {
        let a: Shared<Box<[Box<str>]>> = ["shared-tests-edit".into()].into();
        let mut b = a.clone();
        b[0] = "shared-tests-edited".into();
        assert_eq!(&*a[0], "shared-tests-edit");
        assert_eq!(&*b[0], "shared-tests-edited");
    }

    #[derive(Hash, PartialEq, Eq)]
    struct Probe(usize);
    intern!(Probe);

    /// Values nobody holds any more leave at the next sweep; held ones stay.
    #[test]
    fn a_pool_sweeps_what_nobody_holds() {
        let held: Vec<_> = (0..10).map(|n| Shared::new(Probe(n))).collect();
        for n in 10..SMALLEST_SWEEP {
            drop(Shared::new(Probe(n)));
        }
        assert_eq!(Probe::pool().len(), SMALLEST_SWEEP);
        let trigger = Shared::new(Probe(usize::MAX));
        assert_eq!(Probe::pool().len(), held.len() + 1);
        // The held ones are still the pool's copies.
        assert!(Shared::ptr_eq(&held[3], &Shared::new(Probe(3))));
        drop(trigger);
    }

    #[test]
    fn serde_reads_into_the_pool() {
        let a: Atom = serde_json::from_str("\"shared-tests-serde\"").unwrap();
        assert!(Shared::ptr_eq(&a, &Atom::from("shared-tests-serde")));
        assert_eq!(serde_json::to_string(&a).unwrap(), "\"shared-tests-serde\"");
    }
}
