//! The message of the OTA conditions (`PodNeedUpgrade`, `PodImageReady`):
//! `controllerrevision: <hash>[; why]`. The DaemonSet controller writes it, the node
//! agent and the image-pull controller read the revision back from it, so it is spelled
//! here, below all three.
use crate::names::REVISION_MESSAGE_PREFIX;

/// The condition message naming the current revision: `controllerrevision: <hash>`.
pub fn need_upgrade_message(current_hash: &str) -> String {
    format!("{REVISION_MESSAGE_PREFIX}{current_hash}")
}

/// The hash a `controllerrevision: <hash>[; ...]` condition message names, if any.
pub fn revision_in_message(message: &str) -> Option<&str> {
    let rest = message.strip_prefix(REVISION_MESSAGE_PREFIX)?;
    let hash = rest.split(';').next().unwrap_or_default().trim();
    (!hash.is_empty()).then_some(hash)
}
