package fifo

import "testing"

func TestPopFrontClearsTheSlotAndKeepsTheArray(t *testing.T) {
	a, b := new(int), new(int)
	q := make([]*int, 0, 2)
	q = append(q, a, b)
	arr := q[:2]
	q = PopFront(q)
	if len(q) != 1 || q[0] != b || arr[0] != nil {
		t.Fatalf("after one pop: %v, array %v", q, arr)
	}
	q = PopFront(q)
	if len(q) != 0 || arr[1] != nil {
		t.Fatalf("after two pops: %v, array %v", q, arr)
	}
	// An emptied queue keeps its place: the next element goes in the
	// slot the last one left.
	q = append(q, a)
	if &q[0] != &arr[1] {
		t.Fatal("an emptied queue moved in its array")
	}
	// So a queue that never holds more than one element never allocates.
	if n := testing.AllocsPerRun(100, func() { q = append(PopFront(q), a) }); n != 0 {
		t.Fatalf("%v allocations a push and pop", n)
	}
}
