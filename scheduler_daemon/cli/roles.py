"""`scheduler-daemon db roles`: the four database roles and their least privileges, as SQL."""

import click

from scheduler_daemon.cli.base import EXIT_UNAVAILABLE
from scheduler_daemon.cli.fleet import db
from scheduler_daemon.cli.output import printable
from scheduler_daemon.settings import resolve_database_url


@db.command("roles")
@click.option(
    "--create",
    is_flag=True,
    help="Create the roles and grant the schema privileges (an administrator, before the first "
    "migrate) instead of the table privileges (the owner, after every migrate).",
)
@click.option("--sql", "as_sql", is_flag=True, help="Print the SQL instead of running it.")
@click.option("--owner", default="scheduler_owner", show_default=True, help="Runs migrate.")
@click.option("--daemon", default="scheduler_daemon", show_default=True, help="Runs run, recover.")
@click.option(
    "--operator",
    default="scheduler_operator",
    show_default=True,
    help="Defines tasks, triggers, cancels, sets the budget.",
)
@click.option(
    "--reader", default="scheduler_reader", show_default=True, help="Reads everything, writes none."
)
@click.option("--schema", default="public", show_default=True, help="Where migrate creates tables.")
@click.pass_context
def db_roles(ctx: click.Context, create: bool, as_sql: bool, schema: str, **names: str) -> None:
    """Grant each role exactly what its commands need on the schema: what every build the schema
    still admits needs (run it again after every migrate, --contract included), or with --create
    make the roles first. Runs in one transaction; fails, changing nothing, unless this role can
    grant it all."""
    from scheduler_daemon.storage import roles
    from scheduler_daemon.storage.database import connect

    role_names = roles.RoleNames(**names)
    if as_sql:
        statements = (
            roles.creation(role_names, schema) if create else roles.grants(role_names, schema)
        )
        click.echo(roles.script(statements), nl=False)
        return
    with connect(resolve_database_url(ctx.obj["database_url"]), autocommit=True) as conn:
        try:
            roles.check_can_grant(conn, schema, create=create)
            if create:
                statements = roles.creation(role_names, schema)
            else:
                oldest = roles.admitted_oldest_build(conn)
                statements = roles.grants(role_names, schema, oldest)
            roles.apply(conn, statements)
        except roles.CannotGrant as exc:
            click.echo(f"error: {printable(str(exc), keep=frozenset())}", err=True)
            ctx.exit(EXIT_UNAVAILABLE)
    done = "created roles" if create else "granted privileges to"
    click.echo(f"{done} {', '.join(role_names.all() if create else role_names.users())}")
