-- mjsched deadline alerts, version 14: the database decides when a job is late, silent,
-- running too long or failing, and each alert is opened (and resolved) once across the fleet
-- (docs/guide/operations.md, "Deadline alerts").
--
-- * The rules are a row per job in job_alert_rule (not columns of scheduled_job: the claim
--   returns every job column, the audit trigger would need them listed, and a job without
--   alerts costs nothing here). Written by set_job_alerts, which records the change in the
--   audit trail (job_change, field 'alerts.<rule>') like any other change to a job.
-- * The alerts are rows of job_alert, UNIQUE per (job, kind, occurrence): the tick that did not
--   start (late_start), the last success the silence is measured from (silent), the run that
--   runs too long (too_long), the failure that made the streak (failing_streak). Every engine's
--   housekeeping calls evaluate_alerts; an INSERT ... ON CONFLICT DO NOTHING RETURNING answers
--   the row to one caller only, and a resolution is an UPDATE ... WHERE resolved_at IS NULL,
--   which one caller only wins. The caller that got a row delivers its notification.
-- * A lost reply: each call carries a token (p_call); the rows it opened or resolved carry it,
--   and a replay of the same call answers them again (nothing is opened twice).
-- Safe to re-run.

CREATE TABLE IF NOT EXISTS mjsched.job_alert_rule (
    job_id                     uuid PRIMARY KEY REFERENCES mjsched.scheduled_job (id) ON DELETE CASCADE,
    late_start_seconds         integer,     -- no run started within this long after its tick
    silent_after_seconds       integer,     -- no Completed run within this long
    too_long_seconds           integer,     -- a Running run past this long
    failing_streak             integer,     -- this many Failed/Timeout runs in a row
    pause_after_failing_streak boolean NOT NULL DEFAULT false,
    updated_at                 timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ck_job_alert_rule_late_start CHECK (late_start_seconds IS NULL OR late_start_seconds BETWEEN 1 AND 31622400),
    CONSTRAINT ck_job_alert_rule_silent CHECK (silent_after_seconds IS NULL OR silent_after_seconds BETWEEN 1 AND 31622400),
    CONSTRAINT ck_job_alert_rule_too_long CHECK (too_long_seconds IS NULL OR too_long_seconds BETWEEN 1 AND 31622400),
    CONSTRAINT ck_job_alert_rule_streak CHECK (failing_streak IS NULL OR failing_streak BETWEEN 1 AND 1000),
    CONSTRAINT ck_job_alert_rule_pause CHECK (NOT pause_after_failing_streak OR failing_streak IS NOT NULL)
);

CREATE TABLE IF NOT EXISTS mjsched.job_alert (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        uuid NOT NULL,           -- no foreign key: a deleted job's open alerts are resolved
    job_name      varchar(200) NOT NULL,
    kind          varchar(20) NOT NULL,
    occurrence    varchar(64) NOT NULL,    -- which window: the tick, the success, or the run (header)
    since         timestamptz NOT NULL,    -- since when the condition holds (the tick, the last success, ...)
    threshold     integer NOT NULL,        -- the rule's seconds (or runs, for failing_streak) when opened
    run_id        uuid,                    -- the run concerned (too_long, failing_streak)
    opened_at     timestamptz NOT NULL,
    resolved_at   timestamptz,
    paused        boolean NOT NULL DEFAULT false,   -- the job was paused by this alert (failing_streak)
    opened_call   uuid,
    resolved_call uuid,
    CONSTRAINT ck_job_alert_kind CHECK (kind IN ('late_start', 'silent', 'too_long', 'failing_streak')),
    CONSTRAINT uq_job_alert UNIQUE (job_id, kind, occurrence)
);
-- The open alerts (status, metrics, the resolution pass): a handful of rows.
CREATE INDEX IF NOT EXISTS ix_job_alert_open ON mjsched.job_alert (kind, job_id) WHERE resolved_at IS NULL;
CREATE INDEX IF NOT EXISTS ix_job_alert_opened_call ON mjsched.job_alert (opened_call);
CREATE INDEX IF NOT EXISTS ix_job_alert_resolved_call ON mjsched.job_alert (resolved_call);

-- set_job_alerts: the job's rules, replacing the ones it had (p_rules: a JSON object of
-- late_start_seconds, silent_after_seconds, too_long_seconds, failing_streak,
-- pause_after_failing_streak; absent or null: off). All off deletes the row. Answers 1, or 0
-- for no such job. Each changed rule is a row of the audit trail.
CREATE OR REPLACE FUNCTION mjsched.set_job_alerts(p_job_id uuid, p_rules jsonb)
RETURNS TABLE (updated integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = mjsched, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_key text;
    v_old jsonb;
    v_new jsonb;
    r mjsched.job_alert_rule;
    j mjsched.scheduled_job;
BEGIN
    IF p_rules IS NULL OR jsonb_typeof(p_rules) <> 'object' THEN
        RAISE EXCEPTION 'alerts must be a JSON object' USING ERRCODE = '22023';
    END IF;
    SELECT k INTO v_key FROM jsonb_object_keys(p_rules) k
     WHERE k NOT IN ('late_start_seconds', 'silent_after_seconds', 'too_long_seconds', 'failing_streak',
                     'pause_after_failing_streak')
     LIMIT 1;
    IF v_key IS NOT NULL THEN
        RAISE EXCEPTION 'alerts.%: not an alert rule', v_key USING ERRCODE = '22023';
    END IF;
    FOR v_key IN SELECT k FROM jsonb_object_keys(p_rules) k ORDER BY k LOOP
        BEGIN
            r := jsonb_populate_record(NULL::mjsched.job_alert_rule, jsonb_build_object(v_key, p_rules -> v_key));
        EXCEPTION WHEN data_exception THEN
            RAISE EXCEPTION 'alerts.%: % is not a valid value (%)', v_key, left(p_rules ->> v_key, 200), SQLERRM
                USING ERRCODE = '22023';
        END;
    END LOOP;
    r := jsonb_populate_record(NULL::mjsched.job_alert_rule, p_rules);
    SELECT * INTO j FROM mjsched.scheduled_job WHERE id = p_job_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 0;
        RETURN;
    END IF;
    SELECT to_jsonb(x) - 'job_id' - 'updated_at' INTO v_old FROM mjsched.job_alert_rule x WHERE x.job_id = p_job_id;
    IF r.late_start_seconds IS NULL AND r.silent_after_seconds IS NULL AND r.too_long_seconds IS NULL
       AND r.failing_streak IS NULL THEN
        DELETE FROM mjsched.job_alert_rule x WHERE x.job_id = p_job_id;
        v_new := NULL;
    ELSE
        INSERT INTO mjsched.job_alert_rule AS x (job_id, late_start_seconds, silent_after_seconds, too_long_seconds,
                                                 failing_streak, pause_after_failing_streak)
        VALUES (p_job_id, r.late_start_seconds, r.silent_after_seconds, r.too_long_seconds, r.failing_streak,
                coalesce(r.pause_after_failing_streak, false))
        ON CONFLICT (job_id) DO UPDATE
           SET late_start_seconds = EXCLUDED.late_start_seconds, silent_after_seconds = EXCLUDED.silent_after_seconds,
               too_long_seconds = EXCLUDED.too_long_seconds, failing_streak = EXCLUDED.failing_streak,
               pause_after_failing_streak = EXCLUDED.pause_after_failing_streak, updated_at = now();
        SELECT to_jsonb(x) - 'job_id' - 'updated_at' INTO v_new FROM mjsched.job_alert_rule x WHERE x.job_id = p_job_id;
    END IF;
    INSERT INTO mjsched.job_change (job_id, job_name, version, action, field, old_value, new_value, app_user, via)
    SELECT j.id, j.name, j.version, 'updated', 'alerts.' || coalesce(o.key, n.key), o.value #>> '{}',
           n.value #>> '{}', nullif(current_setting('mjsched.app_user', true), ''),
           coalesce(nullif(current_setting('mjsched.via', true), ''), 'sql')
      FROM jsonb_each(coalesce(v_old, '{}'::jsonb)) o
      FULL JOIN jsonb_each(coalesce(v_new, '{}'::jsonb)) n ON n.key = o.key
     WHERE (o.value IS DISTINCT FROM n.value)
       AND NOT (coalesce(o.value, 'null'::jsonb) IN ('null'::jsonb, 'false'::jsonb)
                AND coalesce(n.value, 'null'::jsonb) IN ('null'::jsonb, 'false'::jsonb))
     ORDER BY 6;
    RETURN QUERY SELECT 1;
END;
$$;

-- evaluate_alerts: open the alerts whose condition holds and resolve the open ones whose
-- condition ended, at most p_limit of each kind per call; answers the rows this call (p_call)
-- opened or resolved, event 'opened' or 'resolved'. One evaluation at a time across the fleet
-- (a transaction-level advisory lock; a second caller is answered nothing at once), though the
-- unique key alone keeps an alert single. A failing streak whose rule says so pauses the job,
-- through the audited path: the trail says via 'alert'.
CREATE OR REPLACE FUNCTION mjsched.evaluate_alerts(p_call uuid, p_limit integer DEFAULT 100,
                                                   p_now timestamptz DEFAULT NULL)
RETURNS TABLE (alert_id bigint, event varchar(10), job_id uuid, job_name varchar(200), kind varchar(20),
               since timestamptz, threshold integer, run_id uuid, opened_at timestamptz,
               resolved_at timestamptz, paused boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = mjsched, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz;
    v_paused uuid[];
BEGIN
    PERFORM mjsched.check_test_clock(p_now);
    v_now := coalesce(p_now, now());
    IF p_call IS NULL THEN
        RAISE EXCEPTION 'call must be a token (uuid)' USING ERRCODE = '22023';
    END IF;
    IF p_limit IS NULL OR NOT (p_limit BETWEEN 1 AND 10000) THEN
        RAISE EXCEPTION 'limit=% must be between 1 and 10000', p_limit USING ERRCODE = '22023';
    END IF;
    -- A replay of a call whose reply was lost: its rows again, nothing more.
    IF EXISTS (SELECT 1 FROM mjsched.job_alert a WHERE a.opened_call = p_call)
       OR EXISTS (SELECT 1 FROM mjsched.job_alert a WHERE a.resolved_call = p_call) THEN
        RETURN QUERY SELECT * FROM mjsched.alerts_of_call(p_call);
        RETURN;
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtext('mjsched.evaluate_alerts')) THEN
        RETURN;
    END IF;

    -- Resolve first: a condition that ended frees its window before a new one opens.
    UPDATE mjsched.job_alert a SET resolved_at = v_now, resolved_call = p_call
      FROM (SELECT o.id
              FROM mjsched.job_alert o
              LEFT JOIN mjsched.scheduled_job j ON j.id = o.job_id
              LEFT JOIN mjsched.job_alert_rule r ON r.job_id = o.job_id
             WHERE o.resolved_at IS NULL
               AND (j.id IS NULL
                    OR CASE o.kind
                         WHEN 'late_start' THEN r.late_start_seconds IS NULL OR j.status <> 'Active'
                              OR j.next_run_at IS DISTINCT FROM o.since
                              OR EXISTS (SELECT 1 FROM mjsched.scheduled_job_run x
                                          WHERE x.scheduled_job_id = o.job_id AND x.scheduled_for = o.since)
                         WHEN 'silent' THEN r.silent_after_seconds IS NULL OR j.status <> 'Active'
                              OR j.last_success_at > o.since
                         WHEN 'too_long' THEN r.too_long_seconds IS NULL
                              OR NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run x
                                              WHERE x.id = o.run_id AND x.status = 'Running')
                         ELSE r.failing_streak IS NULL OR j.last_success_at > o.since
                       END)
             ORDER BY o.id
             LIMIT p_limit) AS done
     WHERE a.id = done.id AND a.resolved_at IS NULL;

    -- late_start: the job's tick is N past and no run of it exists (a claim moves next_run_at on).
    INSERT INTO mjsched.job_alert AS a (job_id, job_name, kind, occurrence, since, threshold, opened_at, opened_call)
    SELECT j.id, j.name, 'late_start', 'tick ' || to_char(j.next_run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'),
           j.next_run_at, r.late_start_seconds, v_now, p_call
      FROM mjsched.job_alert_rule r
      JOIN mjsched.scheduled_job j ON j.id = r.job_id
     WHERE r.late_start_seconds IS NOT NULL AND j.status = 'Active' AND j.next_run_at IS NOT NULL
       AND j.next_run_at < v_now - r.late_start_seconds * interval '1 second'
       AND NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run x
                        WHERE x.scheduled_job_id = j.id AND x.scheduled_for = j.next_run_at)
     LIMIT p_limit
    ON CONFLICT DO NOTHING;

    -- silent: no Completed run since the last success (or the job's creation) for N.
    INSERT INTO mjsched.job_alert AS a (job_id, job_name, kind, occurrence, since, threshold, opened_at, opened_call)
    SELECT j.id, j.name, 'silent',
           'since ' || to_char(coalesce(j.last_success_at, j.created_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'),
           coalesce(j.last_success_at, j.created_at), r.silent_after_seconds, v_now, p_call
      FROM mjsched.job_alert_rule r
      JOIN mjsched.scheduled_job j ON j.id = r.job_id
     WHERE r.silent_after_seconds IS NOT NULL AND j.status = 'Active'
       AND coalesce(j.last_success_at, j.created_at) < v_now - r.silent_after_seconds * interval '1 second'
     LIMIT p_limit
    ON CONFLICT DO NOTHING;

    -- too_long: a Running run started more than N ago.
    INSERT INTO mjsched.job_alert AS a (job_id, job_name, kind, occurrence, since, threshold, run_id, opened_at,
                                        opened_call)
    SELECT j.id, j.name, 'too_long', 'run ' || x.id::text, x.started_at, r.too_long_seconds, x.id, v_now, p_call
      FROM mjsched.job_alert_rule r
      JOIN mjsched.scheduled_job j ON j.id = r.job_id
      JOIN mjsched.scheduled_job_run x ON x.scheduled_job_id = r.job_id AND x.status = 'Running'
     WHERE r.too_long_seconds IS NOT NULL
       AND x.started_at < v_now - r.too_long_seconds * interval '1 second'
     LIMIT p_limit
    ON CONFLICT DO NOTHING;

    -- failing_streak: the N-th Failed/Timeout run after the last success (the run that made
    -- the streak; the streak's first failure is its since). Cancelled, Abandoned and Skipped
    -- runs neither count nor break it.
    INSERT INTO mjsched.job_alert AS a (job_id, job_name, kind, occurrence, since, threshold, run_id, opened_at,
                                        opened_call)
    SELECT j.id, j.name, 'failing_streak', 'run ' || nth.id::text, first.completed_at, r.failing_streak, nth.id,
           v_now, p_call
      FROM mjsched.job_alert_rule r
      JOIN mjsched.scheduled_job j ON j.id = r.job_id
      CROSS JOIN LATERAL (SELECT x.id, x.completed_at FROM mjsched.scheduled_job_run x
                           WHERE x.scheduled_job_id = j.id AND x.completed_at IS NOT NULL
                             AND x.completed_at > coalesce(j.last_success_at, '-infinity')
                             AND x.status IN ('Failed', 'Timeout')
                           ORDER BY x.completed_at, x.id
                           OFFSET r.failing_streak - 1 LIMIT 1) AS nth
      CROSS JOIN LATERAL (SELECT x.completed_at FROM mjsched.scheduled_job_run x
                           WHERE x.scheduled_job_id = j.id AND x.completed_at IS NOT NULL
                             AND x.completed_at > coalesce(j.last_success_at, '-infinity')
                             AND x.status IN ('Failed', 'Timeout')
                           ORDER BY x.completed_at, x.id LIMIT 1) AS first
     WHERE r.failing_streak IS NOT NULL
     LIMIT p_limit
    ON CONFLICT DO NOTHING;

    -- The streaks this call opened pause their job when the rule says so (audited as 'alert').
    SELECT array_agg(a.job_id) INTO v_paused
      FROM mjsched.job_alert a JOIN mjsched.job_alert_rule r ON r.job_id = a.job_id
     WHERE a.opened_call = p_call AND a.kind = 'failing_streak' AND r.pause_after_failing_streak;
    IF v_paused IS NOT NULL THEN
        PERFORM set_config('mjsched.via', 'alert', true);
        UPDATE mjsched.scheduled_job j SET status = 'Paused' WHERE j.id = ANY (v_paused) AND j.status = 'Active';
        UPDATE mjsched.job_alert a SET paused = true
         WHERE a.opened_call = p_call AND a.kind = 'failing_streak' AND a.job_id = ANY (v_paused);
        PERFORM set_config('mjsched.via', '', true);
    END IF;
    RETURN QUERY SELECT * FROM mjsched.alerts_of_call(p_call);
END;
$$;

-- alerts_of_call: what evaluate_alerts answers, for its first call and a replay alike. Internal.
CREATE OR REPLACE FUNCTION mjsched.alerts_of_call(p_call uuid)
RETURNS TABLE (alert_id bigint, event varchar(10), job_id uuid, job_name varchar(200), kind varchar(20),
               since timestamptz, threshold integer, run_id uuid, opened_at timestamptz,
               resolved_at timestamptz, paused boolean)
LANGUAGE sql STABLE AS $$
    SELECT a.id, 'resolved'::varchar(10), a.job_id, a.job_name, a.kind, a.since, a.threshold, a.run_id, a.opened_at,
           a.resolved_at, a.paused
      FROM mjsched.job_alert a WHERE a.resolved_call = p_call
    UNION ALL
    SELECT a.id, 'opened'::varchar(10), a.job_id, a.job_name, a.kind, a.since, a.threshold, a.run_id, a.opened_at,
           NULL::timestamptz, a.paused
      FROM mjsched.job_alert a WHERE a.opened_call = p_call
     ORDER BY 1, 2 DESC
$$;

REVOKE ALL ON FUNCTION mjsched.set_job_alerts(uuid, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION mjsched.evaluate_alerts(uuid, integer, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION mjsched.alerts_of_call(uuid) FROM PUBLIC;
