//go:build race

package adaptive

const raceEnabled = true
