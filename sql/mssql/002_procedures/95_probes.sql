-- 002_procedures, probes and helpers: JSON depth, the internal list, the permission probe.

-- engines_holding_locks: the engines of a host that still hold a job lock or a Running
-- run, with their pid and whether they stopped cleanly. A starting engine releases what
-- such an engine holds when its process is gone (release_engine_locks).
CREATE OR ALTER PROCEDURE mjsched.engines_holding_locks
    @p_host nvarchar(255)
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    SELECT e.instance, e.pid, e.stopped_at
      FROM mjsched.engine_instance AS e
     WHERE e.host = @p_host
       AND e.instance IN (SELECT j.locked_by_instance FROM mjsched.scheduled_job AS j
                           WHERE j.lock_token IS NOT NULL
                          UNION
                          SELECT r.executed_by_instance FROM mjsched.scheduled_job_run AS r
                           WHERE r.status = N'Running')
     ORDER BY e.instance;
END;
GO

-- internal_routines: the building blocks the procedures call as their owner. They take
-- @p_now without check_test_clock, or change rows unfenced (abandon_runs), so the engine
-- role may not call them directly: grants.sql denies them to it, and the probe skips
-- them. One row per name (PostgreSQL returns a text[]; its runs_of_tokens has no T-SQL
-- twin). This list itself stays readable by the role (grants.sql grants SELECT on it).
CREATE OR ALTER FUNCTION mjsched.internal_routines()
RETURNS TABLE
AS
RETURN
    SELECT r.internal_routines
      FROM (VALUES (N'test_pause'), (N'claimable'), (N'claim_token'), (N'abandon_runs'), (N'renew_tokens'),
                   (N'complete_items'), (N'take_over'), (N'expire_ended_jobs'), (N'claim_replay'), (N'claim_queued'), (N'claim_ticks'),
                   (N'next_due_at'), (N'claim_counters'), (N'purge_candidates'), (N'note_engine_seen'),
                   (N'json_nesting_exceeds'), (N'tag_problem'), (N'check_tag'),
                   (N'resume_paused_jobs'), (N'tags_at_limit'), (N'admit_by_tag_limits'), (N'alerts_of_call'),
                   (N'take_jobs'), (N'lease_until'), (N'due')) AS r (internal_routines);
GO

-- probe_permissions: which mjsched routines the current user may execute, the internal
-- ones (internal_routines) left out: they run only inside the procedures.
-- The names are listed here, not read from sys.objects: metadata visibility hides the
-- very routines a user has no permission on. The parity test checks that this list is
-- exactly the set of routines in this file, 004_job_admin.sql and 006_retention.sql. An inline
-- table-valued function is used with SELECT, not EXECUTE: internal_routines is the one
-- the probe asks about (grants.sql grants it).
CREATE OR ALTER PROCEDURE mjsched.probe_permissions
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    SELECT r.name AS procedure_name,
           CASE WHEN HAS_PERMS_BY_NAME(CONCAT(N'mjsched.', r.name), N'OBJECT',
                                       CASE WHEN r.name = N'internal_routines' THEN N'SELECT'
                                            ELSE N'EXECUTE' END) = 1
                THEN 1 ELSE 0 END AS can_execute
      FROM (VALUES (N'abandon_runs'), (N'acquire_job_lock'), (N'admit_by_tag_limits'), (N'advance_job'), (N'alerts_of_call'), (N'begin_job_run'),
                   (N'cancel_requests'), (N'cancel_run'), (N'check_fence'), (N'check_job_fields'), (N'check_lease'), (N'check_tag'), (N'check_test_clock'), (N'claim_counters'),
                   (N'claim_due_jobs'), (N'claim_queued'), (N'claim_replay'), (N'claim_ticks'),
                   (N'claim_token'), (N'claimable'), (N'complete_items'), (N'complete_job_run'),
                   (N'complete_job_runs'), (N'complete_runs'), (N'delete_job'), (N'due'), (N'engines_holding_locks'), (N'enqueue_job_run'), (N'ensure_job_type'),
                   (N'evaluate_alerts'), (N'expire_ended_jobs'), (N'extend_job_leases'), (N'force_unlock_job'),
                   (N'initialize_next_run'), (N'initialize_next_runs'), (N'insert_job'), (N'internal_routines'),
                   (N'json_nesting_exceeds'), (N'lease_interval'), (N'lease_until'), (N'next_due_at'), (N'note_engine_seen'), (N'note_frequency_warned'),
                   (N'pause_jobs'), (N'probe_permissions'),
                   (N'purge_candidates'), (N'purge_job_changes'), (N'purge_runs'), (N'register_engine'),
                   (N'release_engine_locks'), (N'release_job_lock'), (N'renew_leases'), (N'renew_tokens'),
                   (N'resume_jobs'), (N'resume_paused_jobs'), (N'set_job_alerts'), (N'set_tag_limit'),
                   (N'start_manual_run'), (N'sweep_expired_leases'), (N'tag_problem'), (N'tags_at_limit'),
                   (N'take_jobs'), (N'take_over'), (N'test_pause'),
                   (N'unregister_engine'), (N'update_job')) AS r (name)
     WHERE NOT EXISTS (SELECT 1 FROM mjsched.internal_routines() AS i WHERE i.internal_routines = r.name)
     ORDER BY r.name;
END;
GO
