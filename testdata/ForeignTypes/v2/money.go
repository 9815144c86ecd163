// Package money lives in a directory named v2: its import path ends in v2
// but its name is money, which the generated import must use.
package money

// Amount is an amount of money in cents.
type Amount struct {
	Cents    int64
	Currency string
}
