//go:build !race

package ratekey_test

// raceSlack: see race_test.go.
const raceSlack = 0
