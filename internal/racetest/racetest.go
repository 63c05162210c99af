// Package racetest releases goroutines together, for tests that make them
// contend (run with -race): the limiter conformance suite's races and the
// memory store's own.
package racetest

import "sync"

// Run starts n goroutines that each run f(g), g = 0..n-1, once, releases
// them together (so they contend for whatever f touches) and returns when
// all have returned.
func Run(n int, f func(g int)) {
	var start, done sync.WaitGroup
	start.Add(1)
	for g := range n {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			f(g)
		}()
	}
	start.Done()
	done.Wait()
}
