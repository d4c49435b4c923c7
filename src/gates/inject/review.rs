//! One admission: an `admission.k8s.io/v1` AdmissionReview in, the answer out. It
//! reads the namespace's labels and the Services from the shared stores, lets `plan`
//! decide, and always allows the pod (with the patch when there is one): the webhook
//! never stands between a user and a pod. A body that is no AdmissionReview is refused
//! with a sentence naming the problem (HTTP 400 at the server).
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::DynamicObject;
use kube::runtime::reflector::{ObjectRef, Store};

use super::metrics::InjectionMetrics;
use super::plan::{decide, Decision, Scope};
use crate::watch::{for_each_in, NamespaceLabels};

/// What every admission reads: the scope and the shared stores.
#[derive(Clone)]
pub struct Injector {
    pub scope: Arc<Scope>,
    pub namespaces: Store<NamespaceLabels>,
    pub services: Store<Service>,
    pub metrics: InjectionMetrics,
}

impl Injector {
    /// The answer to one request body, or why it is no AdmissionReview of a pod.
    pub fn answer(&self, body: &[u8]) -> Result<AdmissionReview<DynamicObject>, String> {
        let answer = self.answer_unmetered(body);
        match &answer {
            Ok((_, result)) => self.metrics.count(result),
            Err(_) => self.metrics.count("malformed"),
        }
        answer.map(|(review, _)| review)
    }

    fn answer_unmetered(
        &self,
        body: &[u8],
    ) -> Result<(AdmissionReview<DynamicObject>, &'static str), String> {
        let review: AdmissionReview<Pod> = serde_json::from_slice(body).map_err(|e| {
            format!("the body is not an admission.k8s.io/v1 AdmissionReview of a Pod: {e}")
        })?;
        let request: AdmissionRequest<Pod> = review
            .try_into()
            .map_err(|e| format!("the AdmissionReview has no request: {e}"))?;
        let allowed = AdmissionResponse::from(&request);
        let pod = match (
            &request.operation,
            request.kind.kind.as_str(),
            &request.object,
        ) {
            (Operation::Create, "Pod", Some(pod)) => pod,
            (Operation::Create, "Pod", None) => {
                return Err("a Pod CREATE request without the pod (request.object)".into())
            }
            // The configuration sends pod creations only; anything else passes as it is.
            _ => return Ok((allowed.into_review(), "not_a_pod_creation")),
        };
        let namespace = request
            .namespace
            .as_deref()
            .or(pod.metadata.namespace.as_deref())
            .ok_or("the request names no namespace")?;
        let decision = self.decide(pod, namespace);
        let result = decision.result_label();
        let Decision::Inject { gates, patch } = decision else {
            return Ok((allowed.into_review(), result));
        };
        let patch: json_patch::Patch =
            serde_json::from_value(patch).map_err(|e| format!("building the patch: {e}"))?;
        let response = allowed
            .with_patch(patch)
            .map_err(|e| format!("encoding the patch: {e}"))?;
        tracing::info!(
            %namespace,
            pod = pod.metadata.name.as_deref().or(pod.metadata.generate_name.as_deref()).unwrap_or_default(),
            ?gates,
            "readiness gates injected"
        );
        Ok((response.into_review(), result))
    }

    fn decide(&self, pod: &Pod, namespace: &str) -> Decision {
        let namespace_labels = self.namespaces.get(&ObjectRef::new(namespace));
        // Only this namespace's Services are copied (the store is every namespace's).
        let mut services = Vec::new();
        for_each_in(&self.services, |service| {
            if service.metadata.namespace.as_deref() == Some(namespace) {
                services.push(service.clone());
            }
        });
        decide(
            pod,
            namespace,
            namespace_labels
                .as_ref()
                .and_then(|n| n.metadata.labels.as_ref()),
            &services,
            &self.scope,
        )
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kube::core::PartialObjectMeta;
    use serde_json::{json, Value};

    use super::*;
    use crate::gates::service::ClassSelection;
    use crate::metrics::Metrics;
    use crate::names::{GATE_INJECT_ENABLED, GATE_INJECT_LABEL, GATE_PREFIX};
    use crate::testkit::{service, store_of};

    fn injector(metrics: &Metrics) -> Injector {
        let mut web = service("shop", "web", "LoadBalancer", &[]);
        web.spec.as_mut().unwrap().selector = Some(BTreeMap::from([("app".into(), "web".into())]));
        let mut shop: NamespaceLabels = PartialObjectMeta::default();
        shop.metadata.name = Some("shop".into());
        shop.metadata.labels = Some(BTreeMap::from([(
            GATE_INJECT_LABEL.into(),
            GATE_INJECT_ENABLED.into(),
        )]));
        Injector {
            scope: Arc::new(Scope {
                own_namespace: "rollgate-system".into(),
                classes: ClassSelection::Standard,
            }),
            namespaces: store_of([shop]),
            services: store_of([web]),
            metrics: InjectionMetrics::register(metrics),
        }
    }

    fn review(operation: &str, namespace: &str, app: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": namespace,
                "operation": operation,
                "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
                "object": {
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"generateName": "web-", "labels": {"app": app}},
                    "spec": {"containers": [{"name": "web", "image": "nginx"}]}
                },
                "oldObject": null,
                "dryRun": false,
            }
        }))
        .unwrap()
    }

    fn response(review: &AdmissionReview<DynamicObject>) -> Value {
        serde_json::to_value(review).unwrap()["response"].clone()
    }

    #[test]
    fn a_pod_selected_by_a_managed_service_is_allowed_with_the_gate_patch() {
        let metrics = Metrics::default();
        let injector = injector(&metrics);
        let answer = response(&injector.answer(&review("CREATE", "shop", "web")).unwrap());
        assert_eq!(answer["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert_eq!(answer["allowed"], true);
        assert_eq!(answer["patchType"], "JSONPatch");
        // kube sends the patch's bytes as a JSON array (Go decodes it into []byte).
        let bytes: Vec<u8> = serde_json::from_value(answer["patch"].clone()).unwrap();
        let patch: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            patch,
            json!([{"op": "add", "path": "/spec/readinessGates",
                    "value": [{"conditionType": format!("{GATE_PREFIX}web")}]}])
        );
        assert!(metrics
            .render()
            .contains("rollgate_gate_injections_total{result=\"injected\"} 1"));
    }

    #[test]
    fn other_pods_and_other_operations_are_allowed_unchanged() {
        let metrics = Metrics::default();
        let injector = injector(&metrics);
        for (body, result) in [
            (review("CREATE", "shop", "api"), "nothing_to_add"),
            (
                review("CREATE", "elsewhere", "web"),
                "namespace_not_enabled",
            ),
            (review("UPDATE", "shop", "web"), "not_a_pod_creation"),
        ] {
            let answer = response(&injector.answer(&body).unwrap());
            assert_eq!(answer["allowed"], true, "{result}");
            assert!(
                answer.get("patch").is_none_or(Value::is_null),
                "{result}: {answer}"
            );
            assert!(
                metrics.render().contains(&format!(
                    "rollgate_gate_injections_total{{result=\"{result}\"}} 1"
                )),
                "{result}"
            );
        }
    }

    #[test]
    fn a_body_that_is_no_admission_review_is_refused_naming_the_problem() {
        let metrics = Metrics::default();
        let injector = injector(&metrics);
        let error = injector.answer(b"{\"kind\": 3}").unwrap_err();
        assert!(
            error.contains("not an admission.k8s.io/v1 AdmissionReview"),
            "{error}"
        );
        let no_request = injector
            .answer(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#)
            .unwrap_err();
        assert!(no_request.contains("no request"), "{no_request}");
        assert!(metrics
            .render()
            .contains("rollgate_gate_injections_total{result=\"malformed\"} 2"));
    }
}
