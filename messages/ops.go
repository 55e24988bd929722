package messages

// Op names one kind of request. It is the last token of a request subject.
type Op string

// Operations. Vault-scoped ops address an existing vault; VaultCreate,
// VaultImport and VaultList address a namespace.
const (
	OpVaultCreate Op = "vault.create"
	OpVaultList   Op = "vault.list"
	OpVaultInfo   Op = "vault.info"
	OpVaultFork   Op = "vault.fork"
	OpVaultMerge  Op = "vault.merge"
	OpVaultDelete Op = "vault.delete"
	OpVaultExport Op = "vault.export"
	OpVaultImport Op = "vault.import"

	OpWrite      Op = "file.write"
	OpWriteBatch Op = "file.write_batch"
	OpCat        Op = "file.cat"
	OpLs         Op = "file.ls"
	OpStat       Op = "file.stat"
	OpMkdir      Op = "file.mkdir"
	OpRm         Op = "file.rm"
	OpMv         Op = "file.mv"
	OpCp         Op = "file.cp"
	OpLn         Op = "file.ln"
	OpReadTree   Op = "file.read_tree"
	OpImportDir  Op = "file.import_dir"
	OpExportDir  Op = "file.export_dir"
	OpGrep       Op = "file.grep"
	OpFind       Op = "file.find"

	OpSearch  Op = "search.query"
	OpReindex Op = "search.reindex"

	OpLabel     Op = "meta.label"
	OpLabelsGet Op = "meta.get"

	OpCheckpointSave    Op = "checkpoint.save"
	OpCheckpointList    Op = "checkpoint.list"
	OpCheckpointRestore Op = "checkpoint.restore"
	OpCheckpointDelete  Op = "checkpoint.delete"
	OpCheckpointDiff    Op = "checkpoint.diff"

	OpHistoryLog      Op = "history.log"
	OpHistoryCat      Op = "history.cat"
	OpHistoryCheckout Op = "history.checkout"
	OpHistoryRevert   Op = "history.revert"
	OpHistoryDiff     Op = "history.diff"
	OpHistoryPrune    Op = "history.prune"
	OpHistoryGet      Op = "history.get"
	OpHistorySet      Op = "history.set"

	OpVaultSettings Op = "vault.settings"
	OpVaultSet      Op = "vault.set"
	OpStats         Op = "maint.stats"
	OpCompact       Op = "maint.compact"
	OpMaintain      Op = "maint.run"
	OpAuditClear    Op = "audit.clear"

	OpQuotaGet Op = "quota.get"
	OpQuotaSet Op = "quota.set"
	OpAudit    Op = "audit.query"

	OpExec          Op = "exec.run"
	OpApprovalList  Op = "approval.list"
	OpApprovalGrant Op = "approval.grant"
	OpApprovalDeny  Op = "approval.deny"
	OpApprovalShow  Op = "approval.show"
	OpPolicyCheck   Op = "policy.check"

	OpRunStart  Op = "run.start"
	OpRunStatus Op = "run.status"
	OpRunLogs   Op = "run.logs"
	OpRunKill   Op = "run.kill"
	OpRunList   Op = "run.list"
	// OpTransferOpen makes sure the namespace's transfer bucket exists
	// before a caller puts content in it (fleet only).
	OpTransferOpen Op = "transfer.open"

	// OpMountStart asks the vault's owner to serve it as a FUSE mount
	// at a directory of its own machine (`avfs mount` through a
	// fleet); OpMountStop ends that mount.
	OpMountStart Op = "mount.start"
	OpMountStop  Op = "mount.stop"
)

// Mutating reports whether op changes state, and so is recorded in the
// vault's request log for idempotent redelivery.
func (o Op) Mutating() bool {
	switch o {
	case OpVaultList, OpVaultInfo, OpVaultExport, OpCat, OpLs, OpStat, OpReadTree, OpExportDir, OpGrep, OpFind, OpSearch, OpLabelsGet,
		OpCheckpointList, OpCheckpointDiff, OpQuotaGet, OpHistoryLog, OpHistoryCat, OpHistoryDiff, OpHistoryGet, OpAudit, OpApprovalList, OpApprovalShow, OpPolicyCheck, OpTransferOpen,
		OpRunStatus, OpRunLogs, OpRunList, OpVaultSettings, OpStats, OpVaultPush:
		return false
	}
	return true
}

// NeedsVault reports whether op addresses one existing vault.
func (o Op) NeedsVault() bool {
	switch o {
	case OpVaultList, OpVaultCreate, OpVaultImport, OpApprovalList, OpApprovalGrant, OpApprovalDeny, OpApprovalShow, OpPolicyCheck, OpTransferOpen, OpVaultPush:
		return false
	}
	return true
}
