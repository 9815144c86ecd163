module github.com/idemgen/idemgen/examples/grpcapi

go 1.26.0

require (
	github.com/idemgen/idemgen v0.0.0-00010101000000-000000000000
	github.com/idemgen/idemgen/runtime/idemgrpc v0.0.0-00010101000000-000000000000
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/dave/jennifer v1.7.1 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	golang.org/x/mod v0.42.0 // indirect
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	golang.org/x/tools v0.52.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261110000943-09e21b237f2c // indirect
)

replace (
	github.com/idemgen/idemgen => ../..
	github.com/idemgen/idemgen/runtime/idemgrpc => ../../runtime/idemgrpc
)

tool github.com/idemgen/idemgen/cmd/idemgen
