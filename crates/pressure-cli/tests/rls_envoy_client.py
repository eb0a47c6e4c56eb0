"""A client we did not write: grpcio with Envoy's own generated messages
(the `xds-protos` package, generated from envoyproxy/data-plane-api), so the
field numbers and types of pressure's hand-written messages are checked
against the real protos. Prints one JSON object per call.

usage: rls_envoy_client.py HOST:PORT DOMAIN
"""

import json
import sys

import grpc
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
from envoy.type.v3 import ratelimit_unit_pb2
from google.protobuf import wrappers_pb2


def descriptor(value, hits=None, override=None):
    d = ratelimit_pb2.RateLimitDescriptor(
        entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key="k", value=value)]
    )
    if hits is not None:
        d.hits_addend.CopyFrom(wrappers_pb2.UInt64Value(value=hits))
    if override is not None:
        d.limit.CopyFrom(override)
    return d


def show(resp):
    return {
        "overall": rls_pb2.RateLimitResponse.Code.Name(resp.overall_code),
        "statuses": [
            {
                "code": rls_pb2.RateLimitResponse.Code.Name(s.code),
                "limit": s.current_limit.requests_per_unit if s.HasField("current_limit") else None,
                "unit": rls_pb2.RateLimitResponse.RateLimit.Unit.Name(s.current_limit.unit),
                "name": s.current_limit.name,
                "remaining": s.limit_remaining,
                "reset_s": s.duration_until_reset.seconds if s.HasField("duration_until_reset") else None,
            }
            for s in resp.statuses
        ],
        "headers": {h.key: h.value for h in resp.response_headers_to_add},
    }


def main():
    target, domain = sys.argv[1], sys.argv[2]
    with grpc.insecure_channel(target) as channel:
        stub = rls_pb2_grpc.RateLimitServiceStub(channel)
        calls = [rls_pb2.RateLimitRequest(domain=domain, descriptors=[descriptor("a")]) for _ in range(4)]
        calls.append(rls_pb2.RateLimitRequest(domain=domain, descriptors=[descriptor("b", hits=3)]))
        calls.append(rls_pb2.RateLimitRequest(domain=domain, descriptors=[descriptor("c")], hits_addend=2))
        override = ratelimit_pb2.RateLimitDescriptor.RateLimitOverride(
            requests_per_unit=1, unit=ratelimit_unit_pb2.SECOND
        )
        calls += [rls_pb2.RateLimitRequest(domain=domain, descriptors=[descriptor("d", override=override)])] * 2
        for c in calls:
            print(json.dumps(show(stub.ShouldRateLimit(c, timeout=10))), flush=True)


if __name__ == "__main__":
    main()
