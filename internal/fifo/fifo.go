// Package fifo has what the queues kept in slices share: taking the first
// element off without the slice walking off its array.
package fifo

// PopFront removes q's first element, which must exist, and clears its
// slot so that the array holds no reference to it. A queue that empties
// keeps its place in its array: one that seldom holds more than one
// element reuses that slot, where q[1:] would walk off the array's end
// and make append allocate a new one.
func PopFront[T any](q []T) []T {
	var zero T
	q[0] = zero
	if len(q) == 1 {
		return q[:0]
	}
	return q[1:]
}
