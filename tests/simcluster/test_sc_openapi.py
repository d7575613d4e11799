"""OpenAPI v3 with upstream's schemas: ``kubectl explain`` through the real kubectl, and the
document's form (OpenAPI 3.0 references, the kinds' group-version-kind)."""

from __future__ import annotations

from simcluster.embedded import EmbeddedCluster
from tests.support.kubectl import Kubectl, admin_http


def test_kubectl_explain_reads_upstreams_schemas(kubectl: Kubectl) -> None:
    out = kubectl.run("explain", "pods.spec.containers").stdout
    assert "FIELD: containers <[]Container>" in out
    assert "List of containers belonging to the pod." in out
    assert "  image\t<string>" in out and "  resources\t<ResourceRequirements>" in out
    out = kubectl.run("explain", "deployments.spec.replicas").stdout
    assert "GROUP:      apps" in out and "FIELD: replicas <integer>" in out
    missing = kubectl.run("explain", "pods.spec.nope", check=False)
    assert missing.returncode != 0 and 'field "nope" does not exist' in missing.stderr


def test_documents_are_openapi_3_with_the_served_kinds(cluster: EmbeddedCluster) -> None:
    with admin_http(cluster.kubeconfig) as http:
        root = http.get("/openapi/v3").json()["paths"]
        core = http.get(root["api/v1"]["serverRelativeURL"]).json()
    schemas = core["components"]["schemas"]
    pod = schemas["io.k8s.api.core.v1.Pod"]
    assert pod["x-kubernetes-group-version-kind"] == [{"group": "", "kind": "Pod", "version": "v1"}]
    assert pod["type"] == "object"  # not JSON Schema's ["object", "null"]
    assert pod["properties"]["spec"]["allOf"] == [
        {"$ref": "#/components/schemas/io.k8s.api.core.v1.PodSpec"}
    ]
    assert "enum" not in pod["properties"]["apiVersion"]
    assert "io.k8s.api.apps.v1.Deployment" not in schemas  # apps/v1 has its own document
    assert "#/$defs/" not in str(core)


CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            description: What the widget should be.
            properties:
              size: {type: integer, description: How large the widget is.}
"""


def test_kubectl_explain_reads_a_crds_schema(kubectl: Kubectl) -> None:
    kubectl.run("apply", "-f", "-", stdin=CRD)
    out = kubectl.run("explain", "widgets.spec").stdout
    assert "GROUP:      example.com" in out and "KIND:       Widget" in out
    assert "What the widget should be." in out
    assert "  size\t<integer>" in out and "How large the widget is." in out
    assert "FIELD: metadata <ObjectMeta>" in kubectl.run("explain", "widgets.metadata").stdout
