// Package unwrap lets the providers' own tests reach the driver under a
// program's endpoint (to make a peer vanish, say) without a method on
// fabric's user types; only packages under fabric can import it.
package unwrap

// Endpoint returns the provider's side of a *fabric.Endpoint; fabric
// sets it.
var Endpoint func(ep any) any

// Domain returns the fabric.DomainRef of a *fabric.Domain, which a
// provider's Endpoint call takes; fabric sets it.
var Domain func(d any) any
