//! An error and its causes in one line, as the node API's bodies and the logs show it.

/// An error with its causes ("client error (Connect): tcp connect error: Connection
/// refused ..."): the top-level kube error alone does not say why.
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
