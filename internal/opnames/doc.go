// Package opnames holds the test of issue 20.1 on generated code: two
// packages (payments and shipping) with a (*Service).Capture each, the
// same annotation and key, wrapped on one executor, keep their own records.
package opnames
