-- sd_masked_v1: a secret value as the reader role sees it (ADR 0031), `p_kind` saying what it
-- is; NULL (a JSON null too) stays as it is.
-- - `url` (a JSON string): its scheme and host, the rest `/***` (user info, path and query
--   carry the secrets of a webhook: a password, a Slack or Telegram token); `***` when it is
--   not a URL.
-- - `headers` (an object): every value `***`, the names kept.
-- - `payload` (a task's): its `url` as `url`, its `headers` as `headers`, the rest as it is
--   (a shell command and a python target are shown to readers: docs/operators/roles.md).
-- - `args` (a trigger's arguments, an object): the value of each key that names a secret as
--   domain/secret.py's is_secret_arg does (`_` read as `-`, containing one of the words
--   below) `***`, the others as they are.
-- - `notify_url`, `notify_headers`: as `url` and `headers` (a fleet setting's key is its kind).
-- - anything else (NULL, another setting's key): the value as it is.
--
-- Read by the views task_secret_shown, occurrence_args_shown, fleet_setting_shown and
-- fleet_setting_event_shown for a role without SELECT on the column (the reader, after
-- `db roles`); a role that may read the column reads it unmasked through them. IMMUTABLE: it
-- reads nothing but its arguments.
--
-- Since revision 0038 (issue 46). This file is the live text (ADR 0028).

CREATE OR REPLACE FUNCTION sd_masked_v1(p_kind text, p_value jsonb)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    v_found text[];
BEGIN
    IF p_value IS NULL OR jsonb_typeof(p_value) = 'null' OR p_kind IS NULL THEN
        RETURN p_value;
    END IF;
    IF p_kind IN ('url', 'notify_url') THEN
        IF jsonb_typeof(p_value) = 'string' THEN
            v_found := regexp_match(p_value #>> '{}',
                '^([A-Za-z][A-Za-z0-9+.-]*://)(?:[^/?#]*@)?([^/?#@]*)');
        END IF;
        RETURN to_jsonb(CASE WHEN v_found IS NULL THEN '***'
                             ELSE v_found[1] || v_found[2] || '/***' END);
    ELSIF p_kind IN ('headers', 'notify_headers') THEN
        IF jsonb_typeof(p_value) <> 'object' THEN
            RETURN to_jsonb('***'::text);
        END IF;
        RETURN coalesce((SELECT jsonb_object_agg(k, '***') FROM jsonb_object_keys(p_value) k),
                        '{}'::jsonb);
    ELSIF p_kind = 'payload' THEN
        IF jsonb_typeof(p_value) <> 'object' THEN
            RETURN to_jsonb('***'::text);
        END IF;
        RETURN p_value
            || CASE WHEN p_value ? 'url'
                    THEN jsonb_build_object('url', sd_masked_v1('url', p_value -> 'url'))
                    ELSE '{}'::jsonb END
            || CASE WHEN p_value ? 'headers'
                    THEN jsonb_build_object('headers',
                                            sd_masked_v1('headers', p_value -> 'headers'))
                    ELSE '{}'::jsonb END;
    ELSIF p_kind = 'args' THEN
        IF jsonb_typeof(p_value) <> 'object' THEN
            RETURN to_jsonb('***'::text);
        END IF;
        RETURN coalesce(
            (SELECT jsonb_object_agg(e.key,
                        CASE WHEN replace(lower(e.key), '_', '-') ~ ('(auth|token|secret|'
                                  'password|passwd|apikey|api-key|cookie|session|signature|'
                                  'credential)')
                             THEN to_jsonb('***'::text) ELSE e.value END)
             FROM jsonb_each(p_value) e),
            '{}'::jsonb);
    END IF;
    RETURN p_value;
END
$function$;
