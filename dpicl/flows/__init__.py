"""The Prefect flows. Importing any of them ties Prefect's temporary server, when one is used, to this process
(`temporary_server`): a flow run killed with SIGKILL leaves no server behind."""

from dpicl.flows.temporary_server import stop_with_this_process

stop_with_this_process()
