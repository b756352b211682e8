"""`scheduler-daemon config show / set` against a real database: the fleet budget."""

import pytest

pytestmark = pytest.mark.smoke


def test_config_set_and_show_the_fleet_budget(cli) -> None:
    assert cli("config", "show", "--json").json() == {"max-concurrent-runs": 16}
    assert cli("config", "set", "max-concurrent-runs", "4").code == 0
    assert cli("config", "show", "--json").json() == {"max-concurrent-runs": 4}
