// Package imports holds no code: its test checks the repository's import
// graph against the rules of docs/ARCHITECTURE.md, so that a change that
// breaks one fails make test instead of a review.
//
//   - No package under runtime/ or cmd/ imports internal/mutant in a build
//     without the tag idemmutant: shipped binaries carry no planted
//     mistakes.
//   - Each runtime leaf (a store, a door, an observer) imports, of this
//     repository, the core (runtime/idem) and its own library only: a leaf
//     never knows another leaf. The framework adapters may build on
//     idemhttp, and a package's own subpackages on it.
package imports
