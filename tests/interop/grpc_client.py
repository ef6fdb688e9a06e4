#!/usr/bin/env python3
"""A stock gRPC client (grpcio) calling cryod over its Unix socket.

grpcio sends `:authority` as the percent-encoded socket path, as grpc-go
and grpc-java do; grpcurl sends the path as it is (both are tried). Server
reflection is asked as grpcurl asks it. No code generated from cryo's protos: the calls
are made on raw bytes, the messages written by hand in protobuf's wire
format (the fields used are documented in proto/cryo/v1/*.proto).

usage: grpc_client.py SOCKET KEY_FILE
prints one JSON line: what each call answered.
"""
import json
import urllib.parse
import sys

import grpc


def field_bytes(number, data):
    """A length-delimited field (wire type 2)."""
    out = bytes([(number << 3) | 2])
    n = len(data)
    while n >= 0x80:
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7
    return out + bytes([n]) + data


def field_varint(number, value):
    out = bytes([(number << 3) | 0])
    while value >= 0x80:
        out += bytes([(value & 0x7F) | 0x80])
        value >>= 7
    return out + bytes([value])


def varint(data, i):
    """The varint at `i`, and where the next field begins."""
    value, shift = 0, 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, i


def strings(data):
    """Every printable string field in a message, depth first."""
    found, i = [], 0
    while i < len(data):
        key, i = varint(data, i)
        wire = key & 7
        if wire == 0:
            _, i = varint(data, i)
        elif wire == 2:
            n, i = varint(data, i)
            chunk = data[i : i + n]
            i += n
            try:
                text = chunk.decode("utf-8")
                if text.isprintable():
                    found.append(text)
                    continue
            except UnicodeDecodeError:
                pass
            try:
                found.extend(strings(chunk))
            except (IndexError, ValueError):
                pass
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError("unknown wire type")
    return found


def main():
    socket, key_file = sys.argv[1], sys.argv[2]
    key = open(key_file).read().strip()
    channel = grpc.insecure_channel("unix:" + socket)
    call = lambda method: channel.unary_unary(
        "/cryo.v1.Control/" + method, request_serializer=None, response_deserializer=None
    )
    meta = [("x-cryo-operator-key", key)]
    out = {}
    hello = field_bytes(1, b"grpcio-test") + field_varint(2, int(sys.argv[3]) if len(sys.argv) > 3 else 2)
    out["hello"] = strings(call("Hello")(hello, metadata=meta, timeout=10))
    out["list"] = strings(call("ChamberList")(b"", metadata=meta, timeout=10))
    try:
        call("ChamberList")(b"", timeout=10)
        out["keyless"] = "answered"
    except grpc.RpcError as e:
        out["keyless"] = "%s: %s" % (e.code().name, e.details())
    # Newer grpcio (1.57+), grpc-go and grpc-java send the socket's path,
    # percent-encoded, as `:authority` (h2 alone refuses it; cryod mends it):
    # sent here as they send it, and named plainly too.
    # grpcurl sends the socket's path as it is.
    for label, authority in [
        ("encoded_authority", urllib.parse.quote(socket, safe="")),
        ("raw_authority", socket),
        ("named_authority", "localhost"),
    ]:
        ch = grpc.insecure_channel("unix:" + socket, options=[("grpc.default_authority", authority)])
        raw = ch.unary_unary("/cryo.v1.Control/ChamberList", request_serializer=None, response_deserializer=None)
        out[label] = strings(raw(b"", metadata=meta, timeout=10))
    # Server reflection (what grpcurl and Postman ask), v1 and v1alpha:
    # ServerReflectionRequest.list_services is field 7, file_containing_symbol 4.
    def reflect(version, request, metadata):
        info = channel.stream_stream(
            "/grpc.reflection.%s.ServerReflection/ServerReflectionInfo" % version,
            request_serializer=None,
            response_deserializer=None,
        )
        return [s for r in info(iter([request]), metadata=metadata, timeout=10) for s in strings(r)]

    for version in ["v1", "v1alpha"]:
        out["reflection_" + version] = reflect(version, field_bytes(7, b""), meta)
    out["reflection_symbol"] = reflect("v1", field_bytes(4, b"cryo.v1.Control"), meta)
    try:
        reflect("v1", field_bytes(7, b""), [])
        out["reflection_keyless"] = "answered"
    except grpc.RpcError as e:
        out["reflection_keyless"] = "%s: %s" % (e.code().name, e.details())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
