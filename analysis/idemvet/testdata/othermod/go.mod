// Another module than the analyzer's test module (example.com/vet), which
// requires it: idemgen's scan of committed generated files stays inside a
// module, so an op shared with this one is found through idemvet's Ops fact.
module example.com/othermod

go 1.26.0

require github.com/idemgen/idemgen v0.0.0

replace github.com/idemgen/idemgen => ../../../..
