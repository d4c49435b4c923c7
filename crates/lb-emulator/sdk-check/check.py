#!/usr/bin/env python3
"""Drive the emulator with the official, unmodified Alibaba Cloud Python SDKs.

Every action our Rust client uses is called through `alibabacloud_slb20140515`,
`alibabacloud_nlb20220430`, `alibabacloud_ecs20140526` and `alibabacloud_vpc20160428`,
pointed at the emulator over plain http. A check passes when the emulator accepted
the SDK's signature and the SDK parsed the answer into its response model with the
fields we rely on populated; one check per product also has the emulator refuse a
request the real API refuses and the SDK surface the documented error code. Both
signing schemes are exercised: ACS3-HMAC-SHA256 (the SDK default) and RPC HMAC-SHA1
(`signature_algorithm='v2'`).

Usage: check.py --endpoint 127.0.0.1:PORT [--access-key-id ID --access-key-secret SECRET]
Prints one line per check and a closing "N passed, M failed"; exits 1 on any failure.
"""
import argparse
import json
import sys
import time
import traceback
import urllib.request

from alibabacloud_ecs20140526 import models as ecs_models
from alibabacloud_ecs20140526.client import Client as EcsClient
from alibabacloud_nlb20220430 import models as nlb_models
from alibabacloud_nlb20220430.client import Client as NlbClient
from alibabacloud_slb20140515 import models as slb_models
from alibabacloud_slb20140515.client import Client as SlbClient
from alibabacloud_tea_openapi.utils_models import Config
from alibabacloud_vpc20160428 import models as vpc_models
from alibabacloud_vpc20160428.client import Client as VpcClient

REGION = "cn-hangzhou"
results = {"passed": 0, "failed": 0}


def check(name):
    def decorator(fn):
        def run(*args, **kwargs):
            try:
                value = fn(*args, **kwargs)
            except Exception as exc:  # report and go on: one failure must not hide others
                results["failed"] += 1
                print(f"FAIL {name}: {exc!r}")
                traceback.print_exc(limit=3, file=sys.stderr)
                return None
            results["passed"] += 1
            print(f"ok   {name}")
            return value
        return run
    return decorator


def expect(condition, message):
    if not condition:
        raise AssertionError(message)


def wait_until(predicate, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def control(endpoint, path, payload=None):
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(
        f"http://{endpoint}/_emulator/{path}", data=data,
        headers={"content-type": "application/json"}, method="POST" if data else "GET")
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


def error_code(exc):
    """The cloud's error code as the SDK reports it (the attribute differs by path)."""
    return str(getattr(exc, "code", "")) + repr(exc)


def config(args, secret=None, signature_algorithm=None):
    cfg = Config(access_key_id=args.access_key_id,
                 access_key_secret=secret or args.access_key_secret,
                 endpoint=args.endpoint, protocol="http", region_id=REGION)
    if signature_algorithm:
        cfg.signature_algorithm = signature_algorithm
    return cfg


def clb_flow(slb, label, endpoint):
    lb = check(f"[{label}] CLB CreateLoadBalancer")(lambda: (
        lambda b: (expect(b.load_balancer_id and b.address, "id/address empty"), b)[1])(
        slb.create_load_balancer(slb_models.CreateLoadBalancerRequest(
            region_id=REGION, load_balancer_name=f"sdk-check-{label}", address_type="internet",
            load_balancer_spec="slb.s1.small")).body))()
    if lb is None:
        return
    lb_id = lb.load_balancer_id

    @check(f"[{label}] CLB DescribeLoadBalancerAttribute")
    def describe():
        body = slb.describe_load_balancer_attribute(slb_models.DescribeLoadBalancerAttributeRequest(
            region_id=REGION, load_balancer_id=lb_id)).body
        expect(body.load_balancer_id == lb_id and body.address == lb.address, "attribute mismatch")
    describe()

    @check(f"[{label}] CLB CreateVServerGroup")
    def create_group():
        body = slb.create_vserver_group(slb_models.CreateVServerGroupRequest(
            region_id=REGION, load_balancer_id=lb_id, vserver_group_name="k8s-80-web")).body
        expect(body.vserver_group_id, "no VServerGroupId")
        return body.vserver_group_id
    group_id = create_group()

    @check(f"[{label}] CLB CreateLoadBalancerTCPListener")
    def create_listener():
        slb.create_load_balancer_tcplistener(slb_models.CreateLoadBalancerTCPListenerRequest(
            region_id=REGION, load_balancer_id=lb_id, listener_port=80, bandwidth=-1,
            vserver_group_id=group_id))
    create_listener()

    @check(f"[{label}] CLB StartLoadBalancerListener")
    def start_listener():
        slb.start_load_balancer_listener(slb_models.StartLoadBalancerListenerRequest(
            region_id=REGION, load_balancer_id=lb_id, listener_port=80, listener_protocol="tcp"))
    start_listener()

    @check(f"[{label}] CLB DescribeLoadBalancerTCPListenerAttribute / UDP (none on 80)")
    def listener_attribute():
        body = slb.describe_load_balancer_tcplistener_attribute(
            slb_models.DescribeLoadBalancerTCPListenerAttributeRequest(
                region_id=REGION, load_balancer_id=lb_id, listener_port=80)).body
        expect(body.vserver_group_id == group_id and body.status == "running",
               "TCP listener attribute mismatch")
        try:
            slb.describe_load_balancer_udplistener_attribute(
                slb_models.DescribeLoadBalancerUDPListenerAttributeRequest(
                    region_id=REGION, load_balancer_id=lb_id, listener_port=80))
        except Exception as exc:  # the SDK raises the cloud's error
            expect("NotFound" in error_code(exc), f"unexpected error {exc!r}")
        else:
            raise AssertionError("a UDP attribute of a TCP-only port was answered")
    listener_attribute()
    @check(f"[{label}] CLB SetLoadBalancerTCPListenerAttribute + DescribeLoadBalancerTCPListenerAttribute")
    def set_listener():
        slb.set_load_balancer_tcplistener_attribute(slb_models.SetLoadBalancerTCPListenerAttributeRequest(
            region_id=REGION, load_balancer_id=lb_id, listener_port=80, health_check_type="http",
            health_check_uri="/healthz", health_check_http_code="http_2xx,http_3xx", health_check_interval=5,
            health_check_connect_timeout=4, healthy_threshold=3, connection_drain="on",
            connection_drain_timeout=60))
        body = slb.describe_load_balancer_tcplistener_attribute(
            slb_models.DescribeLoadBalancerTCPListenerAttributeRequest(
                region_id=REGION, load_balancer_id=lb_id, listener_port=80)).body
        expect(body.health_check_uri == "/healthz" and body.connection_drain_timeout == 60,
               "settings not read back")
    set_listener()

    @check(f"[{label}] CLB DescribeVServerGroups")
    def groups():
        # Listeners are reported only when asked for (IncludeListener defaults to false).
        body = slb.describe_vserver_groups(slb_models.DescribeVServerGroupsRequest(
            region_id=REGION, load_balancer_id=lb_id, include_listener=True)).body
        found = body.vserver_groups.vserver_group
        expect(len(found) == 1 and found[0].vserver_group_id == group_id, "group not listed")
        listeners = found[0].associated_objects.listeners.listener
        expect(listeners and listeners[0].port == 80, "listener association missing")
    groups()

    # The pod IP lives on an ENI of the emulated VPC, as on a Terway cluster.
    eni_id = f"eni-sdk{label.replace('-', '')}"
    control(endpoint, "enis", {"network_interface_id": eni_id, "private_ips": ["10.1.0.7"]})
    backend = {"ServerId": eni_id, "Weight": "100", "Type": "eni", "ServerIp": "10.1.0.7",
               "Port": "8080", "Description": "k8s/80/web/default/c1"}

    @check(f"[{label}] CLB AddVServerGroupBackendServers refuses Type ip (BackendServer.InvalidType)")
    def add_ip_type():
        pod = dict(backend, ServerId="10.1.0.7", Type="ip")
        try:
            slb.add_vserver_group_backend_servers(slb_models.AddVServerGroupBackendServersRequest(
                region_id=REGION, vserver_group_id=group_id, backend_servers=json.dumps([pod])))
        except Exception as exc:  # the SDK raises the cloud's error
            expect("BackendServer.InvalidType" in error_code(exc), f"unexpected error {exc!r}")
        else:
            raise AssertionError("Type ip was accepted")
    add_ip_type()

    @check(f"[{label}] CLB AddVServerGroupBackendServers")
    def add():
        body = slb.add_vserver_group_backend_servers(slb_models.AddVServerGroupBackendServersRequest(
            region_id=REGION, vserver_group_id=group_id,
            backend_servers=json.dumps([backend], ensure_ascii=False))).body
        servers = body.backend_servers.backend_server
        expect(len(servers) == 1 and servers[0].server_id == eni_id, "backend not echoed")
    add()

    @check(f"[{label}] CLB DescribeVServerGroupAttribute")
    def attribute():
        body = slb.describe_vserver_group_attribute(slb_models.DescribeVServerGroupAttributeRequest(
            region_id=REGION, vserver_group_id=group_id)).body
        server = body.backend_servers.backend_server[0]
        expect(server.server_ip == "10.1.0.7" and server.port == 8080 and server.weight == 100,
               "backend fields wrong")
        expect(server.description == backend["Description"], "description mangled")
    attribute()

    @check(f"[{label}] CLB DescribeHealthStatus (turns normal)")
    def health():
        def normal():
            body = slb.describe_health_status(slb_models.DescribeHealthStatusRequest(
                region_id=REGION, load_balancer_id=lb_id, listener_port=80)).body
            servers = body.backend_servers.backend_server
            return servers and servers[0].server_health_status == "normal" and servers[0]
        server = wait_until(normal, "backend healthy")
        expect(server.server_ip == "10.1.0.7" and server.listener_port == 80, "health fields wrong")
    health()

    @check(f"[{label}] CLB SetVServerGroupAttribute (weight 0)")
    def set_weight():
        drained = dict(backend, Weight="0")
        body = slb.set_vserver_group_attribute(slb_models.SetVServerGroupAttributeRequest(
            region_id=REGION, vserver_group_id=group_id, backend_servers=json.dumps([drained]))).body
        expect(body.backend_servers.backend_server[0].weight == 0, "weight not changed")
    set_weight()

    @check(f"[{label}] CLB RemoveVServerGroupBackendServers")
    def remove():
        key = {k: backend[k] for k in ("ServerId", "Type", "ServerIp", "Port")}
        body = slb.remove_vserver_group_backend_servers(slb_models.RemoveVServerGroupBackendServersRequest(
            region_id=REGION, vserver_group_id=group_id, backend_servers=json.dumps([key]))).body
        expect(body.backend_servers.backend_server == [] or not body.backend_servers.backend_server,
               "backend still listed")
    remove()

    @check(f"[{label}] CLB Create/Set/DescribeLoadBalancerHTTPSListener(Attribute), HTTP too")
    def layer7_listeners():
        control(endpoint, "server-certificates", {"id": f"cert-{label}"})
        slb.create_load_balancer_httpslistener(slb_models.CreateLoadBalancerHTTPSListenerRequest(
            region_id=REGION, load_balancer_id=lb_id, listener_port=443, bandwidth=-1,
            sticky_session="off", health_check="on", server_certificate_id=f"cert-{label}",
            vserver_group_id=group_id, health_check_uri="/healthz", health_check_timeout=8,
            health_check_method="get"))
        slb.set_load_balancer_httpslistener_attribute(slb_models.SetLoadBalancerHTTPSListenerAttributeRequest(
            region_id=REGION, load_balancer_id=lb_id, listener_port=443, health_check_timeout=9))
        body = slb.describe_load_balancer_httpslistener_attribute(
            slb_models.DescribeLoadBalancerHTTPSListenerAttributeRequest(
                region_id=REGION, load_balancer_id=lb_id, listener_port=443)).body
        expect(body.server_certificate_id == f"cert-{label}" and body.health_check_timeout == 9
               and body.health_check_uri == "/healthz" and body.vserver_group_id == group_id,
               "HTTPS settings not read back")
        slb.create_load_balancer_httplistener(slb_models.CreateLoadBalancerHTTPListenerRequest(
            region_id=REGION, load_balancer_id=lb_id, listener_port=8080, sticky_session="off",
            health_check="on", vserver_group_id=group_id))
        slb.set_load_balancer_httplistener_attribute(slb_models.SetLoadBalancerHTTPListenerAttributeRequest(
            region_id=REGION, load_balancer_id=lb_id, listener_port=8080, health_check_timeout=7))
        body = slb.describe_load_balancer_httplistener_attribute(
            slb_models.DescribeLoadBalancerHTTPListenerAttributeRequest(
                region_id=REGION, load_balancer_id=lb_id, listener_port=8080)).body
        expect(body.health_check_timeout == 7 and body.health_check == "on", "HTTP settings not read back")
    layer7_listeners()

    @check(f"[{label}] CLB DeleteLoadBalancer")
    def delete():
        body = slb.delete_load_balancer(slb_models.DeleteLoadBalancerRequest(
            region_id=REGION, load_balancer_id=lb_id)).body
        expect(body.request_id, "no RequestId")
    delete()


def job_done(nlb, job_id):
    return nlb.get_job_status(nlb_models.GetJobStatusRequest(job_id=job_id)).body.status


def wait_job(nlb, job_id):
    status = wait_until(lambda: (s := job_done(nlb, job_id)) != "Processing" and s, f"job {job_id}")
    expect(status == "Succeeded", f"job {job_id} ended {status}")


def nlb_flow(nlb, label, endpoint):
    @check(f"[{label}] NLB CreateLoadBalancer + GetLoadBalancerAttribute (Active)")
    def create_lb():
        body = nlb.create_load_balancer(nlb_models.CreateLoadBalancerRequest(
            region_id=REGION, load_balancer_type="Network", load_balancer_name=f"sdk-check-{label}",
            address_type="Internet", address_ip_version="ipv4", vpc_id="vpc-sdk",
            zone_mappings=[nlb_models.CreateLoadBalancerRequestZoneMappings(zone_id="cn-hangzhou-h", v_switch_id="vsw-h"),
                           nlb_models.CreateLoadBalancerRequestZoneMappings(zone_id="cn-hangzhou-i", v_switch_id="vsw-i")])).body
        expect(body.loadbalancer_id, "no LoadbalancerId")
        attr = wait_until(lambda: (a := nlb.get_load_balancer_attribute(nlb_models.GetLoadBalancerAttributeRequest(
            load_balancer_id=body.loadbalancer_id, region_id=REGION)).body).load_balancer_status == "Active" and a,
            "NLB active")
        expect(attr.dnsname and attr.load_balancer_id == body.loadbalancer_id, "attribute fields empty")
        return body.loadbalancer_id
    lb_id = create_lb()
    if lb_id is None:
        return

    @check(f"[{label}] NLB CreateServerGroup + GetJobStatus")
    def create_group():
        body = nlb.create_server_group(nlb_models.CreateServerGroupRequest(
            region_id=REGION, server_group_name=f"k8s-80-web-{label}", server_group_type="Ip", protocol="TCP",
            vpc_id="vpc-sdk", health_check_config=nlb_models.CreateServerGroupRequestHealthCheckConfig(
                health_check_enabled=True))).body
        expect(body.server_group_id and body.job_id, "no ServerGroupId/JobId")
        wait_job(nlb, body.job_id)
        return body.server_group_id
    group_id = create_group()

    @check(f"[{label}] NLB ListServerGroups")
    def list_groups():
        body = nlb.list_server_groups(nlb_models.ListServerGroupsRequest(
            region_id=REGION, server_group_names=[f"k8s-80-web-{label}"])).body
        expect(len(body.server_groups) == 1 and body.server_groups[0].server_group_id == group_id, "group not found")
        expect(body.server_groups[0].health_check.health_check_enabled is True, "health check model empty")
    list_groups()

    @check(f"[{label}] NLB UpdateServerGroupAttribute + GetJobStatus")
    def update_group():
        body = nlb.update_server_group_attribute(nlb_models.UpdateServerGroupAttributeRequest(
            region_id=REGION, server_group_id=group_id, connection_drain_enabled=True,
            connection_drain_timeout=60,
            health_check_config=nlb_models.UpdateServerGroupAttributeRequestHealthCheckConfig(
                health_check_enabled=True, health_check_type="HTTP", health_check_url="/healthz",
                health_check_http_code=["http_2xx"], http_check_method="HEAD"))).body
        expect(body.job_id, "no JobId")
        wait_job(nlb, body.job_id)
        listed = nlb.list_server_groups(nlb_models.ListServerGroupsRequest(
            region_id=REGION, server_group_ids=[group_id])).body.server_groups[0]
        expect(listed.health_check.health_check_url == "/healthz" and listed.connection_drain_timeout == 60,
               "settings not read back")
    update_group()

    @check(f"[{label}] NLB CreateListener + ListListeners")
    def create_listener():
        body = nlb.create_listener(nlb_models.CreateListenerRequest(
            region_id=REGION, load_balancer_id=lb_id, listener_protocol="TCP", listener_port=80,
            server_group_id=group_id)).body
        expect(body.listener_id and body.job_id, "no ListenerId/JobId")
        wait_job(nlb, body.job_id)
        listed = nlb.list_listeners(nlb_models.ListListenersRequest(region_id=REGION, load_balancer_ids=[lb_id])).body
        expect(len(listed.listeners) == 1 and listed.listeners[0].listener_port == 80, "listener not listed")
        return body.listener_id
    listener_id = create_listener()

    servers = [nlb_models.AddServersToServerGroupRequestServers(
        server_id=f"10.2.0.{i}", server_type="Ip", server_ip=f"10.2.0.{i}", port=8080, weight=100,
        description="k8s/80/web/ns/c1") for i in (1, 2)]

    @check(f"[{label}] NLB AddServersToServerGroup + GetJobStatus")
    def add():
        body = nlb.add_servers_to_server_group(nlb_models.AddServersToServerGroupRequest(
            region_id=REGION, server_group_id=group_id, servers=servers)).body
        expect(body.job_id and body.server_group_id == group_id, "no JobId")
        wait_job(nlb, body.job_id)
    add()

    @check(f"[{label}] NLB ListServerGroupServers (paged)")
    def list_servers():
        first = nlb.list_server_group_servers(nlb_models.ListServerGroupServersRequest(
            region_id=REGION, server_group_id=group_id, max_results=1)).body
        expect(len(first.servers) == 1 and first.next_token and first.total_count == 2, "first page wrong")
        second = nlb.list_server_group_servers(nlb_models.ListServerGroupServersRequest(
            region_id=REGION, server_group_id=group_id, max_results=1, next_token=first.next_token)).body
        expect(len(second.servers) == 1 and not second.next_token, "second page wrong")
        expect(first.servers[0].description == "k8s/80/web/ns/c1", "description mangled")
    list_servers()

    @check(f"[{label}] NLB GetListenerHealthStatus (turns healthy)")
    def health():
        def healthy():
            body = nlb.get_listener_health_status(nlb_models.GetListenerHealthStatusRequest(
                region_id=REGION, listener_id=listener_id)).body
            info = body.listener_health_status[0].server_group_infos[0]
            expect(info.server_group_id == group_id, "wrong group")
            listed = nlb.list_server_group_servers(nlb_models.ListServerGroupServersRequest(
                region_id=REGION, server_group_id=group_id)).body
            return not info.non_normal_servers and all(s.status == "Available" for s in listed.servers)
        wait_until(healthy, "servers healthy")
    health()

    @check(f"[{label}] NLB UpdateServerGroupServersAttribute (weight 0 -> Unused)")
    def drain():
        body = nlb.update_server_group_servers_attribute(nlb_models.UpdateServerGroupServersAttributeRequest(
            region_id=REGION, server_group_id=group_id, servers=[nlb_models.UpdateServerGroupServersAttributeRequestServers(
                server_id="10.2.0.1", server_type="Ip", server_ip="10.2.0.1", port=8080, weight=0)])).body
        wait_job(nlb, body.job_id)
        status = nlb.get_listener_health_status(nlb_models.GetListenerHealthStatusRequest(
            region_id=REGION, listener_id=listener_id)).body
        abnormal = status.listener_health_status[0].server_group_infos[0].non_normal_servers
        expect(len(abnormal) == 1 and abnormal[0].status == "Unused" and abnormal[0].server_ip == "10.2.0.1",
               "drained server not reported Unused")
    drain()

    @check(f"[{label}] NLB forced failed job is reported Failed")
    def failed_job():
        control(endpoint, "jobs", {"force": ["Failed"]})
        body = nlb.remove_servers_from_server_group(nlb_models.RemoveServersFromServerGroupRequest(
            region_id=REGION, server_group_id=group_id, servers=[nlb_models.RemoveServersFromServerGroupRequestServers(
                server_id="10.2.0.2", server_type="Ip", server_ip="10.2.0.2", port=8080)])).body
        status = wait_until(lambda: (s := job_done(nlb, body.job_id)) != "Processing" and s, "job end")
        expect(status == "Failed", f"expected Failed, got {status}")
    failed_job()

    @check(f"[{label}] NLB RemoveServersFromServerGroup")
    def remove():
        body = nlb.remove_servers_from_server_group(nlb_models.RemoveServersFromServerGroupRequest(
            region_id=REGION, server_group_id=group_id, servers=[nlb_models.RemoveServersFromServerGroupRequestServers(
                server_id=f"10.2.0.{i}", server_type="Ip", server_ip=f"10.2.0.{i}", port=8080) for i in (1, 2)])).body
        wait_job(nlb, body.job_id)
        listed = nlb.list_server_group_servers(nlb_models.ListServerGroupServersRequest(
            region_id=REGION, server_group_id=group_id)).body
        expect(listed.servers == [] or not listed.servers, "servers remain")
    remove()

    @check(f"[{label}] NLB DeleteLoadBalancer")
    def delete():
        body = nlb.delete_load_balancer(nlb_models.DeleteLoadBalancerRequest(region_id=REGION, load_balancer_id=lb_id)).body
        wait_job(nlb, body.job_id)
    delete()


def ecs_vpc_flow(ecs, vpc, label, endpoint):
    # The ENI name is the one field of these calls that takes Unicode letters (SDK
    # model), so the signers' UTF-8 encoding is exercised here.
    name = f"集群-eni_{label.replace('-', '')}.a"
    net = "10.3.1" if label == "acs3" else "10.3.2"
    eni = control(endpoint, "enis", {"private_ips": [f"{net}.1", f"{net}.2"], "vpc_id": "vpc-sdk",
                                     "name": name})
    control(endpoint, "enis", {"private_ips": [f"{net}.3"], "vpc_id": "vpc-sdk", "status": "Available"})

    @check(f"[{label}] ECS DescribeNetworkInterfaces (VpcId + PrivateIpAddress.N, InUse)")
    def enis():
        body = ecs.describe_network_interfaces(ecs_models.DescribeNetworkInterfacesRequest(
            region_id=REGION, vpc_id="vpc-sdk", status="InUse", max_results=100,
            private_ip_address=[f"{net}.2", f"{net}.3", "10.3.9.9"])).body
        found = body.network_interface_sets.network_interface_set
        expect(len(found) == 1 and found[0].network_interface_id == eni["network_interface_id"],
               f"wrong ENIs {[f.network_interface_id for f in found]}")
        ips = [p.private_ip_address for p in found[0].private_ip_sets.private_ip_set]
        expect(ips == [f"{net}.1", f"{net}.2"], f"private IPs {ips}")
        by_name = ecs.describe_network_interfaces(ecs_models.DescribeNetworkInterfacesRequest(
            region_id=REGION, network_interface_name=name)).body
        expect(len(by_name.network_interface_sets.network_interface_set) == 1, "Unicode name not matched")
    enis()

    @check(f"[{label}] ECS DescribeNetworkInterfaces refuses 101 private IPs")
    def too_many():
        try:
            ecs.describe_network_interfaces(ecs_models.DescribeNetworkInterfacesRequest(
                region_id=REGION, private_ip_address=[f"10.4.0.{i}" for i in range(1, 102)]))
        except Exception as exc:
            expect("InvalidParameter.PrivateIpAddress" in error_code(exc), f"unexpected error {exc!r}")
        else:
            raise AssertionError("101 IPs were accepted")
    too_many()

    @check(f"[{label}] VPC DescribeVpcAttribute (CidrBlock, SecondaryCidrBlocks, UserCidrs)")
    def cidrs():
        body = vpc.describe_vpc_attribute(vpc_models.DescribeVpcAttributeRequest(
            region_id=REGION, vpc_id="vpc-sdk")).body
        expect(body.cidr_block == "10.0.0.0/8", f"CidrBlock {body.cidr_block}")
        expect(body.secondary_cidr_blocks.secondary_cidr_block == ["172.16.0.0/12"], "secondary blocks")
        expect(body.user_cidrs.user_cidr == ["100.64.0.0/10"], "user CIDRs")
    cidrs()


def bad_signature(args):
    @check("wrong secret is rejected with SignatureDoesNotMatch (V3 and RPC)")
    def run():
        for algorithm in (None, "v2"):
            client = SlbClient(config(args, secret="not-the-secret", signature_algorithm=algorithm))
            try:
                client.describe_vserver_groups(slb_models.DescribeVServerGroupsRequest(
                    region_id=REGION, load_balancer_id="lb-x"))
            except Exception as exc:  # the SDK wraps errors differently per path
                text = repr(exc) + str(getattr(exc, "code", "")) + str(getattr(exc, "inner_exception", ""))
                expect("SignatureDoesNotMatch" in text, f"unexpected error {exc!r}")
            else:
                raise AssertionError("a wrong secret was accepted")
    run()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--access-key-id", default="emulator-access-key-id")
    parser.add_argument("--access-key-secret", default="emulator-access-key-secret")
    args = parser.parse_args()

    control(args.endpoint, "vpcs", {"vpc_id": "vpc-sdk", "cidr_block": "10.0.0.0/8",
                                    "secondary_cidr_blocks": ["172.16.0.0/12"], "user_cidrs": ["100.64.0.0/10"]})
    for label, algorithm in (("acs3", None), ("rpc-v1", "v2")):
        clb_flow(SlbClient(config(args, signature_algorithm=algorithm)), label, args.endpoint)
        nlb_flow(NlbClient(config(args, signature_algorithm=algorithm)), label, args.endpoint)
        ecs_vpc_flow(EcsClient(config(args, signature_algorithm=algorithm)),
                     VpcClient(config(args, signature_algorithm=algorithm)), label, args.endpoint)
    bad_signature(args)

    @check("emulator counted the rejected signatures")
    def stats():
        state = control(args.endpoint, "state")
        expect(state["stats"]["rejected_signatures"] >= 2, f"stats {state['stats']}")
        timeline = control(args.endpoint, "timeline")["events"]
        kinds = {e["event"] for e in timeline}
        expect({"registered", "healthy", "weight-changed", "removed"} <= kinds, f"timeline kinds {kinds}")
    stats()

    print(f"{results['passed']} passed, {results['failed']} failed")
    sys.exit(1 if results["failed"] else 0)


if __name__ == "__main__":
    main()
