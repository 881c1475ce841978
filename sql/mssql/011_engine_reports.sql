-- mjsched engine reports, version 11 (T-SQL twin of sql/postgres/011_engine_reports.sql, issue
-- 36; the reasons are there): what an engine reports of itself when it registers, so that
-- `mjsched jobs why` can tell from the database alone why a job does not run.
--
-- * engine_instance.allowed_drivers: the drivers the engine may run, their names sorted and
--   joined by commas; NULL when it runs every driver, and for an engine of an earlier release.
-- * register_engine (moved here from 002_procedures) takes it as @p_allowed_drivers, last
--   and optional: the previous release's call names the parameters it knows, and CREATE OR
--   ALTER keeps the procedure's permissions.
-- The column is added in its own batch, before the procedure that writes it: SQL Server
-- resolves the columns of an existing table when it creates a procedure. Safe to re-run.
--
-- A procedure keeps the SET options it was created with: the first batch sets them, as the
-- other scripts do, for this file applied by hand (sqlcmd).

SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
SET ANSI_PADDING ON;
SET ANSI_WARNINGS ON;
SET ARITHABORT ON;
SET CONCAT_NULL_YIELDS_NULL ON;
SET NUMERIC_ROUNDABORT OFF;
GO

IF COL_LENGTH(N'mjsched.engine_instance', N'allowed_drivers') IS NULL
BEGIN
    ALTER TABLE mjsched.engine_instance ADD allowed_drivers nvarchar(4000) NULL;
END;
GO

-- register_engine: the table of live engines behind `mjsched status` and `mjsched jobs why`.
-- The upsert holds a key-range lock (SERIALIZABLE) so two registrations of one name
-- cannot both insert.
CREATE OR ALTER PROCEDURE mjsched.register_engine
    @p_instance nvarchar(255),
    @p_host nvarchar(255),
    @p_pid int,
    @p_version nvarchar(50),
    @p_heartbeat_seconds float = NULL,
    @p_max_concurrent_jobs int = NULL,
    @p_allowed_drivers nvarchar(4000) = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @v_now datetimeoffset = SYSDATETIMEOFFSET();
    DECLARE @v_rows int;
    DECLARE @v_message nvarchar(400);
    BEGIN TRY
        SET @v_message = CONCAT(N'heartbeat_seconds=', COALESCE(CONVERT(nvarchar(40), @p_heartbeat_seconds), N'NULL'),
                                N' must be in (0, 86400]');
        IF @p_heartbeat_seconds <= 0 OR @p_heartbeat_seconds > 86400   -- NULL (not given) passes
        BEGIN
            THROW 50022, @v_message, 1;
        END;
        SET @v_message = CONCAT(N'allowed_drivers=', SUBSTRING(@p_allowed_drivers, 1, 100),
                                N': must be NULL (every driver) or driver names joined by commas, ',
                                N'at most 4000 characters');
        IF LEN(LTRIM(RTRIM(@p_allowed_drivers))) = 0   -- NULL (every driver) passes
        BEGIN
            THROW 50022, @v_message, 1;
        END;
        BEGIN TRANSACTION;
        UPDATE e
           SET host = @p_host, pid = @p_pid, version = @p_version,
               started_at = @v_now, last_seen_at = @v_now, stopped_at = NULL,
               heartbeat_seconds = @p_heartbeat_seconds, max_concurrent_jobs = @p_max_concurrent_jobs,
               allowed_drivers = @p_allowed_drivers
          FROM mjsched.engine_instance AS e WITH (UPDLOCK, SERIALIZABLE)
         WHERE e.instance = @p_instance;
        SET @v_rows = @@ROWCOUNT;
        IF @v_rows = 0
        BEGIN
            INSERT INTO mjsched.engine_instance (instance, host, pid, version, started_at, last_seen_at, stopped_at,
                                                 heartbeat_seconds, max_concurrent_jobs, allowed_drivers)
            VALUES (@p_instance, @p_host, @p_pid, @p_version, @v_now, @v_now, NULL,
                    @p_heartbeat_seconds, @p_max_concurrent_jobs, @p_allowed_drivers);
        END;
        COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
        IF @@TRANCOUNT > 0
        BEGIN
            ROLLBACK TRANSACTION;
        END;
        THROW;
    END CATCH;
    SELECT 1 AS registered;
END;
GO
