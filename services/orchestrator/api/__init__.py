"""The orchestrator's gRPC API: servicers and protobuf conversion, the only code that sees `_pb2`."""
