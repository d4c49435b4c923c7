#!/usr/bin/env python3
"""Produce signature test vectors with the official Alibaba Cloud Python SDK.

The signing itself is done by the SDK's own functions
(alibabacloud_tea_openapi.utils: get_authorization for ACS3-HMAC-SHA256 and
get_rpcsignature for RPC HMAC-SHA1) with a fixed key, nonce, time and parameters, so
the Rust signer is checked against an independent implementation rather than only
against our own emulator.

    PY=$(bash hack/cloud-sdk-venv.sh)
    $PY crates/alibaba-lb/sdk-vectors/generate.py > crates/alibaba-lb/sdk-vectors/vectors.json

The output is deterministic; `--check` compares with the committed file instead.
"""
import json
import sys
from importlib import metadata
from pathlib import Path
from urllib.parse import quote, urlencode

from alibabacloud_tea_openapi.utils import Utils
from darabonba.request import DaraRequest

ACCESS_KEY_ID = "LTAI5tTestAccessKeyId"
ACCESS_KEY_SECRET = "TestAccessKeySecret/With+Odd=Chars"
SECURITY_TOKEN = "CAIS.test-security-token/with+chars=="
TIMESTAMP = "2024-05-06T07:08:09Z"
NONCE = "3f6c1d2e9a8b4c7d"
HOST = "slb.cn-hangzhou.aliyuncs.com"
NLB_HOST = "nlb.cn-hangzhou.aliyuncs.com"
ALGORITHM = "ACS3-HMAC-SHA256"

# Values that stress the encoder: space, '*', '~', '/', '+', '=', '&', unicode, empty.
AWKWARD_BACKENDS = json.dumps(
    [{"ServerId": "eni-1", "Weight": "100", "Type": "eni", "ServerIp": "10.0.0.1",
      "Port": "80", "Description": "k8s/80/web app*~/default/集群"}],
    ensure_ascii=False, separators=(",", ":"))


def rfc3986_form(pairs):
    """The body encoding our client uses (%20 for space; '~' kept)."""
    return urlencode(pairs, quote_via=quote, safe="~")


def v3_case(name, method, query, headers, body, with_token=False):
    payload_hex = Utils.hash(body.encode("utf-8"), ALGORITHM).hex()
    headers = dict(headers)
    headers["x-acs-content-sha256"] = payload_hex
    if with_token:
        headers["x-acs-security-token"] = SECURITY_TOKEN
    request = DaraRequest()
    request.method = method
    request.pathname = "/"
    request.query = dict(query)
    request.headers = headers
    authorization = Utils.get_authorization(
        request, ALGORITHM, payload_hex, ACCESS_KEY_ID, ACCESS_KEY_SECRET)
    return {
        "name": name,
        "method": method,
        "pathname": "/",
        "query": query,
        "headers": [[k, v] for k, v in headers.items()],
        "body": body,
        "content_sha256": payload_hex,
        "authorization": authorization,
    }


def rpc_case(name, method, params):
    return {
        "name": name,
        "method": method,
        "params": [[k, v] for k, v in params.items()],
        "signature": Utils.get_rpcsignature(dict(params), method, ACCESS_KEY_SECRET),
    }


def base_headers(host, action, version):
    return {
        "host": host,
        "x-acs-action": action,
        "x-acs-version": version,
        "x-acs-date": TIMESTAMP,
        "x-acs-signature-nonce": NONCE,
    }


def v3_cases():
    clb_query = {
        "RegionId": "cn-hangzhou",
        "VServerGroupId": "rsp-bp1 *~",
        "BackendServers": AWKWARD_BACKENDS,
        "OwnerAccount": "",
    }
    nlb_form = [
        ("ServerGroupId", "sgp-1"),
        ("Servers.1.ServerId", "10.0.0.1"),
        ("Servers.1.ServerType", "Ip"),
        ("Servers.1.ServerIp", "10.0.0.1"),
        ("Servers.1.Port", "8080"),
        ("Servers.1.Weight", "0"),
        ("Servers.1.Description", "k8s/80/web app*~/ns/集群"),
        ("RegionId", "cn-hangzhou"),
        ("ClientToken", "tok en~*"),
    ]
    nlb_headers = base_headers(NLB_HOST, "AddServersToServerGroup", "2022-04-30")
    nlb_headers["content-type"] = "application/x-www-form-urlencoded"
    sdk_like = base_headers(HOST, "DescribeHealthStatus", "2014-05-15")
    sdk_like["user-agent"] = "AlibabaCloud (Linux; x86_64) Python/3.11.7 Core/0.4.3 TeaDSL/2"
    sdk_like["accept"] = "application/json"
    return [
        v3_case("clb-query-awkward-values", "POST", clb_query,
                base_headers(HOST, "AddVServerGroupBackendServers", "2014-05-15"), ""),
        v3_case("nlb-form-body", "POST", {}, nlb_headers, rfc3986_form(nlb_form)),
        v3_case("nlb-form-body-sdk-encoding", "POST", {}, nlb_headers,
                Utils.to_form(dict(nlb_form))),
        v3_case("sts-token", "POST", {"RegionId": "cn-hangzhou", "LoadBalancerId": "lb-1"},
                base_headers(HOST, "DescribeLoadBalancerAttribute", "2014-05-15"), "",
                with_token=True),
        v3_case("get-with-sdk-headers", "GET", {"LoadBalancerId": "lb-1", "ListenerPort": "80"},
                sdk_like, ""),
        v3_case("no-parameters", "POST", {},
                base_headers(NLB_HOST, "GetJobStatus", "2022-04-30"), ""),
    ]


def rpc_common(action, version, with_token=False):
    params = {
        "Action": action,
        "Version": version,
        "Format": "JSON",
        "Timestamp": TIMESTAMP,
        "SignatureMethod": "HMAC-SHA1",
        "SignatureVersion": "1.0",
        "SignatureNonce": NONCE,
        "AccessKeyId": ACCESS_KEY_ID,
    }
    if with_token:
        params["SecurityToken"] = SECURITY_TOKEN
    return params


def rpc_cases():
    clb = rpc_common("AddVServerGroupBackendServers", "2014-05-15")
    clb.update({"RegionId": "cn-hangzhou", "VServerGroupId": "rsp-1",
                "BackendServers": AWKWARD_BACKENDS, "OwnerAccount": ""})
    nlb = rpc_common("AddServersToServerGroup", "2022-04-30", with_token=True)
    nlb.update({"ServerGroupId": "sgp-1", "Servers.1.ServerId": "10.0.0.1",
                "Servers.1.Description": "a b*c~d/集群", "RegionId": "cn-hangzhou"})
    plain = rpc_common("DescribeHealthStatus", "2014-05-15")
    plain.update({"LoadBalancerId": "lb-1"})
    return [
        rpc_case("clb-awkward-values-post", "POST", clb),
        rpc_case("nlb-with-security-token-post", "POST", nlb),
        rpc_case("plain-get", "GET", plain),
    ]


def main():
    vectors = {
        "comment": "Generated by generate.py with the official Alibaba Cloud Python SDK; do not edit.",
        "sdk": {pkg: metadata.version(pkg)
                for pkg in ("alibabacloud-tea-openapi", "darabonba-core")},
        "access_key_id": ACCESS_KEY_ID,
        "access_key_secret": ACCESS_KEY_SECRET,
        "security_token": SECURITY_TOKEN,
        "timestamp": TIMESTAMP,
        "nonce": NONCE,
        "v3": v3_cases(),
        "rpc": rpc_cases(),
    }
    text = json.dumps(vectors, ensure_ascii=False, indent=2) + "\n"
    if "--check" in sys.argv:
        committed = (Path(__file__).parent / "vectors.json").read_text(encoding="utf-8")
        if committed != text:
            print("vectors.json differs from what the SDK produces now", file=sys.stderr)
            sys.exit(1)
        print("vectors.json matches the SDK")
        return
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
