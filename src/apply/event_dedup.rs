//! Event de-duplication: the last message per object and topic, so a Warning or a
//! progress Event is published when it changes, not on every resync.
//!
//! kube's recorder also merges identical Events into one object with a count; that
//! still counts one occurrence per resync. Users read that count, so repeats are not
//! sent at all.
use std::collections::HashMap;
use std::sync::Mutex;

/// What an Event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Topic {
    /// Bad input: the object is not acted upon.
    Warning,
    /// Rollout progress (also marks "a rollout is under way").
    Progress,
    /// Nodes a rollout leaves out because the DaemonSet no longer places a pod there.
    Placement,
    /// A rollout halted on a failing revision (said once per revision).
    Halt,
    /// The wave a rollout is in (said once per template and wave).
    Wave,
    /// A rollout's first deletions (said once per revision).
    Deleting,
}

#[derive(Default)]
pub struct EventDedup(Mutex<HashMap<(String, Topic), String>>);

impl EventDedup {
    /// True when `message` differs from the last one said on `topic` about the object
    /// with this UID, and records it.
    pub fn first_time(&self, uid: &str, topic: Topic, message: &str) -> bool {
        let mut said = self.0.lock().unwrap();
        let key = (uid.to_string(), topic);
        if said.get(&key).map(String::as_str) == Some(message) {
            return false;
        }
        said.insert(key, message.to_string());
        true
    }

    pub fn has_said(&self, uid: &str, topic: Topic) -> bool {
        self.0
            .lock()
            .unwrap()
            .contains_key(&(uid.to_string(), topic))
    }

    pub fn forget(&self, uid: &str, topic: Topic) {
        self.0.lock().unwrap().remove(&(uid.to_string(), topic));
    }

    /// The object is gone.
    pub fn forget_object(&self, gone: &str) {
        self.0.lock().unwrap().retain(|(uid, _), _| uid != gone);
    }

    /// Keeps only the objects `live` says still exist.
    pub fn retain(&self, live: impl Fn(&str) -> bool) {
        self.0.lock().unwrap().retain(|(uid, _), _| live(uid));
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn says_each_message_once_per_object_and_topic() {
        let said = EventDedup::default();
        assert!(said.first_time("a", Topic::Warning, "bad"));
        assert!(!said.first_time("a", Topic::Warning, "bad"));
        assert!(said.first_time("a", Topic::Progress, "bad"));
        assert!(said.first_time("b", Topic::Warning, "bad"));
        assert!(said.first_time("a", Topic::Warning, "worse"));
        said.forget("a", Topic::Warning);
        assert!(said.first_time("a", Topic::Warning, "worse"));
        said.forget_object("a");
        assert!(!said.has_said("a", Topic::Progress));
        assert_eq!(said.len(), 1);
        said.retain(|uid| uid != "b");
        assert!(said.is_empty());
    }
}
