// Package layers holds no code, only the test that keeps rdmago's layering
// (ARCHITECTURE.md): wire knows nothing of queue pairs or I/O, verbs knows nothing
// of UDP, and nothing below cmd imports cmd.
package layers
