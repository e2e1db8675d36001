//go:build !race

package rxe

const raceEnabled = false
