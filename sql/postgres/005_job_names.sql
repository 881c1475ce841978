-- mjsched job names, version 5: a job's name is unique (constraint uq_scheduled_job_name), so an
-- application can declare its jobs by name (engine.ensure_job, engine.sync_jobs, `mjsched jobs
-- apply`) and every API call and CLI verb can take a name where it takes an id.
--
-- A database of an earlier release may hold several jobs of one name (create_job at every
-- start-up added one each time). The upgrade resolves them before it adds the constraint, the
-- same way every time: in each group of jobs of one name, the oldest (created_at, then id) keeps
-- the name; every other is renamed '<name> (duplicate <first 8 hex digits of its id>)' (the name
-- cut to fit 200 characters; the whole id if even that name is taken). Nothing else of a renamed
-- job changes: its id, status, schedule, configuration, statistics and run history stay, so it
-- runs as it did until someone pauses or deletes it (sync_jobs with remove_missing='pause' or
-- 'delete' does, since no declaration names it). Each rename is recorded as a Skipped run of the
-- renamed job whose error_message says what was done (executed_by_instance 'mjsched install',
-- as 001_schema.sql records a job it sets aside), and engine.install() logs it as a WARNING.
-- Names are compared as the constraint compares them: exactly in PostgreSQL.
-- Safe to re-run: with the constraint in place there is nothing to resolve.
-- Set-based, so a database of tens of thousands of copies upgrades in about a second.
DO $$
DECLARE
    v_renamed integer;
BEGIN
    CREATE TEMP TABLE mjsched_renames ON COMMIT DROP AS
    SELECT g.id, g.name, g.kept_id, g.n,
           left(g.name, 179) || ' (duplicate ' || left(g.id::text, 8) || ')' AS new_name
      FROM (SELECT j.id, j.name,
                   first_value(j.id) OVER w AS kept_id,
                   row_number() OVER w AS rn,
                   count(*) OVER (PARTITION BY j.name) AS n
              FROM mjsched.scheduled_job j
            WINDOW w AS (PARTITION BY j.name ORDER BY j.created_at, j.id)) g
     WHERE g.rn > 1;
    -- a new name some job has already, or two copies would get: the whole id instead (as set
    -- operations: the table has no index on name yet, and a lookup per copy took seconds)
    UPDATE mjsched_renames r
       SET new_name = left(r.name, 151) || ' (duplicate ' || r.id::text || ')'
      FROM (SELECT x.new_name FROM mjsched_renames x GROUP BY x.new_name HAVING count(*) > 1
            UNION
            SELECT j.name FROM mjsched.scheduled_job j
             WHERE j.name IN (SELECT x.new_name FROM mjsched_renames x)) c
     WHERE c.new_name = r.new_name;
    UPDATE mjsched.scheduled_job j SET name = r.new_name FROM mjsched_renames r WHERE j.id = r.id;
    GET DIAGNOSTICS v_renamed = ROW_COUNT;
    INSERT INTO mjsched.scheduled_job_run
           (scheduled_job_id, status, error_message, started_at, completed_at, duration_ms,
            executed_by_instance)
    SELECT r.id, 'Skipped',
           format('renamed by the schema upgrade: job names are now unique, and %s jobs were named %s; '
                  'the oldest (%s) keeps the name and this one is now %s. Its status, schedule, '
                  'statistics and history are unchanged: pause or delete it if it was a copy of that job, '
                  'or give it a name of its own.',
                  r.n, quote_literal(r.name), r.kept_id, quote_literal(r.new_name)),
           now(), now(), 0, 'mjsched install'
      FROM mjsched_renames r
     ORDER BY r.name, r.id;
    IF v_renamed > 0 THEN
        RAISE WARNING 'mjsched upgrade: % job(s) renamed "<name> (duplicate <id>)": their names were taken by '
                      'an older job (each has a Skipped run saying which)', v_renamed;
    END IF;
    DROP TABLE mjsched_renames;
END;
$$;

ALTER TABLE mjsched.scheduled_job
    DROP CONSTRAINT IF EXISTS uq_scheduled_job_name,
    ADD CONSTRAINT uq_scheduled_job_name UNIQUE (name);
