//go:build race

package rxe

const raceEnabled = true
