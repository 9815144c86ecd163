package memstore

// mutation is one of the known mistakes of internal/mutant that the store
// can plant (CompleteWithoutFencing, TakeoverWithoutFingerprint), for the
// simulator's tests to find. They are compiled in only with the build tag
// idemmutant (mutation_on.go); in every other build mutated is the constant
// false and the shipped store does not import internal/mutant.
type mutation uint32

// The values are internal/mutant's Flag values; mutation_on.go checks at
// compile time that they agree.
const (
	mCompleteWithoutFencing     mutation = 1 << 1
	mTakeoverWithoutFingerprint mutation = 1 << 3
)
