//go:build !race

package middleware_test

// raceSlack: see race_test.go.
const raceSlack = 0
