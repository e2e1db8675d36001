// Package course is what the OFA course's programs share (seed 003,
// "Writing Application Programs for RDMA using OFA Software"): the
// ping-pong programs ping-sr-0 to ping-sr-4 and the blast programs
// blast-sr-2e and blast-sr-2 under examples/. Each of those declares, as
// a Lesson, what it does that ping-sr-0 does not, and keeps the code that
// only it has (ping-sr-3's sleep on the completion channel, ping-sr-4's
// one wait for both channels); the client's main, the listener's and the
// agent's flow (Lesson.Run) and the pieces that stay the same from one
// lesson to the next are here, named after the course's our_* functions:
//
//	client main, server main, our_agent       Lesson.Run
//	struct our_options, our_process_options   Options, ParseOptions
//	our_report_*, our_trace_*, our_report_error (*Options).Report, Trace, ReportError
//	struct our_connect_info, htonll / ntohll  ConnectInfo, Marshal, ParseConnectInfo
//	struct our_control                        Control (NewControl)
//	our_create_id                             (*Control).CreateID
//	our_client_bind                           (*Control).ClientBind
//	our_listener_bind                         (*Control).ListenerBind
//	our_await_cm_event                        (*Control).AwaitCMEvent (event channel)
//	our_migrate_id                            (*Control).MigrateID
//	our_setup_qp (pd, [comp channel], cq, qp) (*Control).SetupQP
//	our_setup_client_buffers                  (*Control).SetupClientBuffers
//	our_setup_agent_buffers                   (*Control).SetupAgentBuffers
//	our_post_send, our_post_recv              (*Control).PostSend, PostRecv
//	our_check_completion_status               (*Control).CheckCompletion
//	our_await_completion (ping-sr-0: busy)    (*Control).AwaitCompletionBusy
//	our_await_completion (ping-sr-2)          (*Control).AwaitCompletionBusyCM
//	our_await_completion (ping-sr-3, 4)       (*Control).AwaitNotified, with the lesson's wait
//	our_setup_conn_params                     ConnParams
//	our_client_connect, our_agent_connect     (*Control).ClientConnect, AgentConnect
//	our_client_operation, our_agent_operation PingClient, PingAgent, BlastClient, BlastAgent
//	our_create_cm_event_thread (ping-sr-2)    (*Control).StartCMEventThread
//	our_disconnect                            (*Control).Disconnect
//	our_unsetup_buffers, our_unsetup_qp       (*Control).UnsetupBuffers, UnsetupQP
//	our_destroy_id                            (*Control).DestroyID
//
// # What Go changes
//
// A C program that is killed has its connections closed by the kernel,
// which sends the peer a disconnect request: that is how the course's
// ping-sr-2 learns, from a DISCONNECTED event, that its peer died. rdmago's
// connection manager runs inside the program, so a killed peer sends
// nothing; ping-sr-2, 3 and 4 and blast-sr-2 therefore also post a
// zero-length RDMA WRITE when they have waited for KeepaliveIdle without a
// completion (as rsockets' keepalive does), and a peer that no longer
// answers fails it with IBV_WC_RETRY_EXC_ERR within the transport's
// retries (ACKTimeout, RetryCount). A program interrupted with SIGINT or
// SIGTERM disconnects before it exits, as the kernel would for it.
//
// A NIC needs no CPU to deliver a completion; the software device's
// goroutines do, so the busy polls of ping-sr-0 to 2 yield the CPU
// between polls (sched_yield). They still take a whole CPU while they
// wait, which is the course's third problem.
package course
