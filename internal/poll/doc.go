// Package poll waits for a condition with a deadline, for tests: the one
// way a test of avfs waits for something that happens in the background
// (a heartbeat, a push, an audit event), instead of a fixed sleep that is
// too short on a loaded machine and too long on an idle one.
//
// The condition is checked at once, then at growing intervals (10 ms up
// to 200 ms) until it holds or the deadline passes; a failure says what
// was awaited, how long, and the condition's last error.
package poll
