"""The seal: everything an agent that runs untrusted code gets around its session, in one
call (:func:`spider2local.seal.session.open_seal`)."""
