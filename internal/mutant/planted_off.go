//go:build !idemmutant

package mutant

// Planted reports whether this build compiles the mutations into the
// runtime (the build tag idemmutant): without it, With switches nothing on.
const Planted = false
