package handler

import (
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/vault"
)

// AuditEvent is e as the wire carries it (audit.query and the audit
// stream).
func AuditEvent(e vault.Event) messages.AuditEvent { return auditEvent(e) }
