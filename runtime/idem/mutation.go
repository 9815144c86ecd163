package idem

// mutation is one of the known mistakes of internal/mutant that the
// executor can plant (ReleaseAfterFinal, LostCompleteReplyAsLeaseLost,
// QuickCompleteGiveUp, OutageAsRefusal, ReleaseOutageGiveUp), for the simulator's tests to find. They are compiled
// in only with the build tag idemmutant (mutation_on.go); in every other
// build mutated is the constant false and the shipped executor does not
// import internal/mutant.
type mutation uint32

// The values are internal/mutant's Flag values; mutation_on.go checks at
// compile time that they agree.
const (
	mReleaseAfterFinal            mutation = 1 << 0
	mLostCompleteReplyAsLeaseLost mutation = 1 << 2
	mQuickCompleteGiveUp          mutation = 1 << 4
	mOutageAsRefusal              mutation = 1 << 5
	mReleaseOutageGiveUp          mutation = 1 << 6
)
